"""The reference plans service: a small real REST backend (FastAPI + SQLite).

Not part of the Temporal worker: it is the backend the plans toolset talks to over HTTP
(``parley plans-service``, also started by ``parley dev``), and the one the demo and
the tests use. Point the toolset at your own with ``PARLEY_PLANS_URL`` and
``PARLEY_PLANS_API_KEY``; this service shows the contract it expects.

Contract:

- Auth: ``Authorization: Bearer <api key>``, else 401 (the presented key is never echoed).
- Caller: ``X-Parley-User: <user id>`` on every request; missing, empty or ``default``
  is a 400. Every row belongs to one user; other users' rows are invisible (404).
- ``POST /plans`` ``{title, description?, due_date?}`` needs an ``Idempotency-Key``:
  the first request creates (201); the same key from the same user returns the same
  row (200, ``Idempotency-Replayed: true``) and creates nothing; the same key with a
  different request is a 409.
- ``GET /plans`` (the caller's plans, ``?status=`` filter), ``GET /plans/{id}``.
- ``PATCH /plans/{id}`` ``{status}`` with status in draft/active/done/cancelled; an
  ``Idempotency-Key`` is accepted and replayed the same way.
- ``DELETE /plans/{id}`` (``?expected_status=draft``: only while the plan still has that
  status, else a 409 that says what it is now) answers ``{"id", "deleted": true}``; an
  ``Idempotency-Key`` is accepted, and the same key answers the same again once the
  row is gone (200, ``Idempotency-Replayed: true``). Another user's plan is a 404.
- Errors are PostgREST-style JSON ``{"code", "message", "details", "hint"}``, request
  validation included (422).
- ``GET /health`` needs no auth.

Test hooks, off unless ``create_app(..., enable_test_hooks=True)``:
``POST /_test/faults`` queues answers for the next requests (``{"faults": [{"status":
503, "retry_after": "2", "body": {...}}]}``; ``"raw"`` gives a non-JSON body;
``"lose_response": true`` processes the request first, then answers the fault instead,
as when a committed write's answer is lost on the way back; ``"delay": 2`` answers
2 s late, and with ``"status": 0`` then processes the request as usual, as a slow
backend does after its caller gave up; ``"method": "POST"`` keeps a fault for the next
request of that method, letting others by, such as a preview's reads),
``GET /_test/requests`` lists what the service saw (method, path, user, idempotency
key, status, and whether a write was answered from its key: ``replayed``),
``DELETE /_test/requests`` and ``DELETE /_test/faults`` clear them.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from parley.services.plans.store import (
    ApiError,
    PlanCreate,
    PlanStatus,
    PlanStatusUpdate,
    PlanStore,
    _fingerprint,
    _validation_details,
    error_response,
)


@dataclass
class Fault:
    status: int
    retry_after: str | None = None
    body: Any = None
    raw: str | None = None
    #: Process the request (commit the write), then answer this fault: a lost response.
    lose_response: bool = False
    #: Seconds to wait before answering; with ``status`` 0, then answer as usual.
    delay: float = 0.0
    #: Only for a request of this method (``POST``): others pass it by (a preview's GET).
    method: str | None = None


@dataclass
class TestHooks:
    faults: deque[Fault] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def create_app(db_path: Path, api_key: str, *, enable_test_hooks: bool = False) -> FastAPI:
    """The plans service over the SQLite file ``db_path``, accepting ``api_key``."""
    if not api_key:
        raise ValueError("the plans service needs an API key")
    store = DeletingPlanStore(db_path)
    hooks = TestHooks()
    app = FastAPI(title="Parley reference plans service", version="1")
    app.state.store = store
    app.state.hooks = hooks if enable_test_hooks else None

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc.errors())
        message = "; ".join(
            f"{d['field']}: {d['message']}" if d["field"] else d["message"] for d in details
        )
        return error_response(
            422,
            "22023",
            message or "invalid request",
            details,
            "fix the listed fields and send the request again",
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(
            exc.status_code, f"HTTP{exc.status_code}", str(exc.detail), headers=exc.headers
        )

    @app.middleware("http")
    async def _auth_and_hooks(request: Request, call_next: Any) -> Response:
        path = request.url.path
        test_route = path.startswith("/_test/")
        if test_route and not enable_test_hooks:
            return error_response(404, "HTTP404", "Not Found")
        if test_route or path == "/health":
            return await call_next(request)
        entry = {
            "method": request.method,
            "path": path,
            "query": str(request.url.query),
            "user": request.headers.get("x-parley-user"),
            "idempotency_key": request.headers.get("idempotency-key"),
            "status": None,
        }
        fault = _next_fault(hooks, request.method) if enable_test_hooks else None
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
            if not fault.status:
                fault = None  # only slow: the request is processed as usual
        if fault is not None and not fault.lose_response:
            response = _fault_response(fault)
        else:
            response = _authorize(request, api_key) or await call_next(request)
            if fault is not None:
                await _drain(response)  # the write is done; its answer is lost
                response = _fault_response(fault)
        if enable_test_hooks:
            entry["status"] = response.status_code
            # An idempotent write answered from its key: no second effect.
            entry["replayed"] = response.headers.get("idempotency-replayed") == "true"
            with hooks.lock:
                hooks.requests.append(entry)
        return response

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/plans", status_code=201)
    def create_plan(
        plan: PlanCreate,
        response: Response,
        x_parley_user: str | None = Header(default=None),
        idempotency_key: str | None = Header(default=None),
    ) -> dict[str, Any]:
        user = _user(x_parley_user)
        if not idempotency_key or not idempotency_key.strip():
            raise ApiError(
                400,
                "PGRST100",
                "an Idempotency-Key header is required to create a plan",
                hint="send Idempotency-Key: <workflow_id>:<tool_call_id>",
            )
        row, replayed = store.create(user, idempotency_key.strip(), plan)
        if replayed:
            response.status_code = 200
            response.headers["Idempotency-Replayed"] = "true"
        return row

    @app.get("/plans")
    def list_plans(
        status: PlanStatus | None = None, x_parley_user: str | None = Header(default=None)
    ) -> list[dict[str, Any]]:
        return store.list(_user(x_parley_user), status)

    @app.get("/plans/{plan_id}")
    def get_plan(plan_id: int, x_parley_user: str | None = Header(default=None)) -> dict[str, Any]:
        return store.get(_user(x_parley_user), plan_id)

    @app.patch("/plans/{plan_id}")
    def update_plan(
        plan_id: int,
        update: PlanStatusUpdate,
        response: Response,
        x_parley_user: str | None = Header(default=None),
        idempotency_key: str | None = Header(default=None),
    ) -> dict[str, Any]:
        user = _user(x_parley_user)
        key = idempotency_key.strip() if idempotency_key and idempotency_key.strip() else None
        row, replayed = store.set_status(user, plan_id, update.status, key)
        if replayed:
            response.headers["Idempotency-Replayed"] = "true"
        return row

    @app.delete("/plans/{plan_id}")
    def delete_plan(
        plan_id: int,
        response: Response,
        expected_status: PlanStatus | None = None,
        x_parley_user: str | None = Header(default=None),
        idempotency_key: str | None = Header(default=None),
    ) -> dict[str, Any]:
        user = _user(x_parley_user)
        key = idempotency_key.strip() if idempotency_key and idempotency_key.strip() else None
        answer, replayed = store.delete(user, plan_id, expected_status, key)
        if replayed:
            response.headers["Idempotency-Replayed"] = "true"
        return answer

    if enable_test_hooks:

        @app.post("/_test/faults")
        async def add_faults(request: Request) -> dict[str, int]:
            payload = await request.json()
            faults = [Fault(**item) for item in payload.get("faults", [])]
            faults += [Fault(status=int(s)) for s in payload.get("statuses", [])]
            with hooks.lock:
                hooks.faults.extend(faults)
                return {"queued": len(hooks.faults)}

        @app.delete("/_test/faults")
        def clear_faults() -> dict[str, int]:
            with hooks.lock:
                hooks.faults.clear()
            return {"queued": 0}

        @app.get("/_test/requests")
        def seen_requests() -> list[dict[str, Any]]:
            with hooks.lock:
                return list(hooks.requests)

        @app.delete("/_test/requests")
        def clear_requests() -> dict[str, int]:
            with hooks.lock:
                hooks.requests.clear()
            return {"requests": 0}

    return app


class DeletingPlanStore(PlanStore):
    """The store, and deleting a plan: a conditional, idempotent delete."""

    def delete(
        self, user_id: str, plan_id: int, expected_status: str | None, key: str | None
    ) -> tuple[dict[str, Any], bool]:
        """``{"id", "deleted"}`` and whether it was a replay of ``key``."""
        fingerprint = _fingerprint(f"DELETE /plans/{plan_id}", {"expected": expected_status})
        answer = {"id": plan_id, "deleted": True}
        with self._connect() as conn:
            if key is not None:
                try:
                    replayed = self._replay(conn, user_id, key, fingerprint) is not None
                except ApiError as err:
                    if err.status != 404:
                        raise  # the key was used for another request: a 409
                    replayed = True  # the key's row is gone: this key deleted it
                if replayed:
                    return answer, True
            row = self._get(conn, user_id, plan_id)
            if expected_status is not None and row["status"] != expected_status:
                raise ApiError(
                    409,
                    "PGRST409",
                    f"plan {plan_id} is {row['status']} now, not {expected_status}: it "
                    "changed since; not deleted",
                    hint="read it again (GET /plans/{id}) and decide anew",
                )
            conn.execute("DELETE FROM plans WHERE id = ? AND user_id = ?", (plan_id, user_id))
            if key is not None:
                self._remember(conn, user_id, key, fingerprint, plan_id)
        return answer, False


def _authorize(request: Request, api_key: str) -> Response | None:
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secrets.compare_digest(
        presented.strip().encode(), api_key.encode()
    ):
        return None
    return error_response(
        401,
        "PGRST301",
        "the API key is missing or not valid",
        hint="send Authorization: Bearer <api key> (PARLEY_PLANS_API_KEY on the worker)",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _user(header: str | None) -> str:
    user = (header or "").strip()
    if not user or user.lower() == "default":
        raise ApiError(
            400,
            "PGRST100",
            "an X-Parley-User header naming the real user is required"
            + ("; 'default' is not a user id" if user.lower() == "default" else ""),
            hint="the worker sends the conversation's user_id",
        )
    return user


def _next_fault(hooks: TestHooks, method: str) -> Fault | None:
    """The first queued fault for a request of ``method``, taken off the queue."""
    with hooks.lock:
        for fault in hooks.faults:
            if fault.method is None or fault.method.upper() == method:
                hooks.faults.remove(fault)
                return fault
        return None


async def _drain(response: Response) -> None:
    body_iterator = getattr(response, "body_iterator", None)
    if body_iterator is not None:
        async for _ in body_iterator:
            pass


def _fault_response(fault: Fault) -> Response:
    headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
    if fault.raw is not None:
        return Response(
            fault.raw, status_code=fault.status, headers=headers, media_type="text/html"
        )
    if fault.body is not None:
        return JSONResponse(fault.body, status_code=fault.status, headers=headers)
    return error_response(
        fault.status,
        f"HTTP{fault.status}",
        f"injected fault (HTTP {fault.status})",
        headers=headers,
    )
