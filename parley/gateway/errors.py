"""The gateway's one error shape, ``{"error": {"type", "message"}}``, and how a
conversation's refusal maps to an HTTP status. Client side (the gateway).

401 unauthenticated, 404 not found (also another user's conversation), 409 not now
(decisions owed, turn running, ended), 410 gone (what the conversation stored was deleted
by retention: the message says when), 413 too large, 422 bad input, 503 no worker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from parley.client import ConversationRefused
from parley.contracts.errors import ErrorType

#: Refusals and the HTTP status each answers.
HTTP_STATUS = {
    ErrorType.NOT_OWNER: 404,
    ErrorType.NOT_FOUND: 404,
    ErrorType.INVALID_SESSION: 422,
    ErrorType.INVALID_USER: 422,
    ErrorType.INVALID_MESSAGE: 422,
    ErrorType.INVALID_DECISION: 422,
    ErrorType.MESSAGE_TOO_LARGE: 413,
    ErrorType.DECISIONS_OWED: 409,
    ErrorType.NO_DECISIONS_OWED: 409,
    ErrorType.TURN_IN_PROGRESS: 409,
    ErrorType.CONVERSATION_ENDED: 409,
    ErrorType.DELETED_BY_RETENTION: 410,
    ErrorType.NO_WORKER: 503,
    ErrorType.UNREACHABLE: 503,
}


#: What pydantic puts before a validator's own message.
VALIDATOR_PREFIX = re.compile(r"^(Value error|Assertion failed), ")


class ApiError(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


def error_response(status: int, error_type: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": error_type, "message": message}}, status_code=status)


def refused(refusal: ConversationRefused, session_id: str) -> ApiError:
    """A refusal as an HTTP error. Not the owner reads exactly as not found."""
    error_type = refusal.error_type or ErrorType.REFUSED
    status = HTTP_STATUS.get(error_type, 502)
    if status == 404:
        return ApiError(404, ErrorType.NOT_FOUND, f"conversation {session_id} not found")
    return ApiError(status, error_type, refusal.message)


def describe(problems: Sequence[Any]) -> str:
    """Pydantic's errors as one line, ``where: what; ...``: no input echoed back, no
    links to pydantic's documentation. A body that is not JSON, or not an object, says
    so (not ``0: JSON decode error``)."""
    parts = []
    for problem in problems:
        if (body := _body_problem(problem)) is not None:
            parts.append(body)
            continue
        where = ".".join(str(p) for p in problem.get("loc", ()) if p != "body")
        if problem.get("type") == "extra_forbidden":
            what = "unknown key"
        else:
            what = VALIDATOR_PREFIX.sub("", str(problem.get("msg", "")))
        parts.append(f"{where}: {what}" if where else what)
    return "; ".join(parts) or "invalid request"


def _body_problem(problem: Any) -> str | None:
    """What is wrong with the body as a whole, if that is the problem."""
    kind, loc = problem.get("type"), tuple(problem.get("loc", ()))
    if kind == "json_invalid":  # its loc is the character where parsing stopped
        why = (problem.get("ctx") or {}).get("error") or "cannot parse it"
        where = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
        return f"the request body is not JSON ({why}{where})"
    if kind == "model_attributes_type" and loc == ("body",):  # curl -d sends a form
        return (
            "the request body is not a JSON object: send one, with the header "
            "Content-Type: application/json"
        )
    return None


def install_error_handlers(app: FastAPI) -> None:
    """Every error the app raises answers in the one JSON shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return error_response(err.status, err.error_type, err.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        problems = err.errors()
        about_decisions = any(
            tuple(p.get("loc", ()))[:2] == ("body", "decisions") for p in problems
        )
        error_type = ErrorType.INVALID_DECISION if about_decisions else ErrorType.INVALID_REQUEST
        return error_response(422, error_type, describe(problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, err: StarletteHTTPException) -> JSONResponse:
        return error_response(err.status_code, "HTTPError", str(err.detail))
