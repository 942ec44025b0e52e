"""What an orchestrator asks the gateway, with no bearer token. Client side (the gateway;
its one Temporal call here is ``GetSystemInfo``, the call a client makes to connect).

- ``GET /healthz``: alive, the process serves HTTP. No Temporal call: a gateway whose
  Temporal is down is still alive (restarting it would not help); a liveness probe.
- ``GET /readyz``: ready, Temporal answers ``GetSystemInfo`` within
  ``READY_TIMEOUT_SECONDS``. Otherwise 503 in the one error shape, ``Unreachable``, with
  one line saying what is wrong: Temporal unreachable or slow, not reached yet since
  the gateway started, or the gateway stopping (draining). A readiness probe; no
  worker is needed to be ready (a call no worker serves answers 503 ``NoWorker``).

``Unconnected`` is what a gateway started while Temporal could not be reached serves
until it connects (``server``): ``/healthz`` 200; everything else, ``/readyz`` too, 503
``Unreachable`` with the reason (a ``/v1`` request without a known token 401 first).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import RPCError, RPCStatusCode

from parley.client import Conversations
from parley.contracts.errors import ErrorType
from parley.gateway.access import TokenTable
from parley.gateway.errors import error_response
from parley.gateway.guard import RefuseBeforeReading, answer
from parley.gateway.oidc import OidcVerifier
from parley.gateway.schemas import ErrorResponse
from parley.gateway.streams import Drain

#: How long ``/readyz`` waits for Temporal's answer.
READY_TIMEOUT_SECONDS = 3.0


class Health(BaseModel):
    status: Literal["ok"] = "ok"


router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Alive: the gateway serves HTTP (no token, no Temporal call). For a liveness
    probe."""
    return Health()


@router.get(
    "/readyz",
    response_model=Health,
    responses={
        503: {
            "model": ErrorResponse,
            "description": "Not ready: Temporal does not answer, or the gateway is stopping "
            "(the message says which).",
        }
    },
)
async def readyz(request: Request) -> Any:
    """Ready: Temporal answers (no token; one cheap call, ``GetSystemInfo``). For a
    readiness probe."""
    state = request.app.state
    problem = await not_ready(state.gateway.conversations, state.drain)
    if problem is not None:
        return error_response(503, ErrorType.UNREACHABLE, problem)
    return Health()


async def not_ready(conversations: Conversations, drain: Drain) -> str | None:
    """Why the gateway cannot serve conversations now, in one line; None if it can."""
    if drain.draining:
        return "this gateway is stopping: reconnect to another one"
    address = conversations.settings.temporal_address
    try:
        await conversations.temporal.workflow_service.get_system_info(
            GetSystemInfoRequest(), timeout=timedelta(seconds=READY_TIMEOUT_SECONDS)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.DEADLINE_EXCEEDED:
            return f"Temporal at {address} did not answer within {READY_TIMEOUT_SECONDS:g} s"
        return f"cannot reach Temporal at {address}: {one_line(err.message)}"
    except Exception as err:  # the client itself failed: say so, still one line
        return f"cannot reach Temporal at {address}: {type(err).__name__}: {one_line(str(err))}"
    return None


def one_line(text: str) -> str:
    return " ".join(text.split()) or "no reason given"


class Unconnected:
    """The gateway's answers before it has reached Temporal: alive, not ready.
    ``problem`` is why it has not (the last attempt's one line)."""

    def __init__(
        self,
        tokens: TokenTable,
        max_body_bytes: int,
        problem: str,
        oidc: OidcVerifier | None = None,
    ) -> None:
        self.problem = problem
        self._guarded = RefuseBeforeReading(
            self._answer, tokens=tokens, max_body_bytes=max_body_bytes, oidc=oidc
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._guarded(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/healthz":
            await answer(send, 503, ErrorType.UNREACHABLE, self.problem)
            return
        body = json.dumps(Health().model_dump()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
