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
- Errors are PostgREST-style JSON ``{"code", "message", "details", "hint"}``, request
  validation included (422).
- ``GET /health`` needs no auth.

Test hooks, off unless ``create_app(..., enable_test_hooks=True)``:
``POST /_test/faults`` queues answers for the next requests (``{"faults": [{"status":
503, "retry_after": "2", "body": {...}}]}``; ``"raw"`` gives a non-JSON body;
``"lose_response": true`` processes the request first, then answers the fault instead,
as when a committed write's answer is lost on the way back),
``GET /_test/requests`` lists what the service saw (method, path, user, idempotency
key, status), ``DELETE /_test/requests`` and ``DELETE /_test/faults`` clear them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

PlanStatus = Literal["draft", "active", "done", "cancelled"]
TITLE_MAX = 200
DESCRIPTION_MAX = 4000

SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT,
    due_date TEXT,
    status TEXT NOT NULL DEFAULT 'draft',
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS plans_user ON plans (user_id);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    user_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    plan_id INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (user_id, key)
);
"""


class ApiError(Exception):
    """An error answer in PostgREST's shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: Any = None,
        hint: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details, self.hint, self.headers = details, hint, headers

    def response(self) -> JSONResponse:
        return error_response(
            self.status, self.code, self.message, self.details, self.hint, self.headers
        )


def error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    hint: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"code": code, "message": message, "details": details, "hint": hint}
    return JSONResponse(body, status_code=status, headers=headers)


class PlanCreate(BaseModel):
    title: str = Field(min_length=1, max_length=TITLE_MAX)
    description: str | None = Field(default=None, max_length=DESCRIPTION_MAX)
    due_date: str | None = Field(default=None, description="an ISO date, YYYY-MM-DD")

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("title must not be blank")
        return value

    @field_validator("due_date")
    @classmethod
    def _due(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        try:
            return date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            raise ValueError(f"due_date {value!r} is not an ISO date (YYYY-MM-DD)") from None


class PlanStatusUpdate(BaseModel):
    status: PlanStatus


@dataclass
class Fault:
    status: int
    retry_after: str | None = None
    body: Any = None
    raw: str | None = None
    #: Process the request (commit the write), then answer this fault: a lost response.
    lose_response: bool = False


@dataclass
class TestHooks:
    faults: deque[Fault] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class PlanStore:
    """SQLite rows; one connection per operation, writes serialized by a lock."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as conn:
            conn.executescript(SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock, closing(sqlite3.connect(self.db_path)) as conn:
            conn.row_factory = sqlite3.Row
            with conn:  # one transaction
                yield conn

    def list(self, user_id: str, status: str | None = None) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM plans WHERE user_id = ?", [user_id]
        if status is not None:
            query, args = query + " AND status = ?", [*args, status]
        with self._connect() as conn:
            return [dict(row) for row in conn.execute(query + " ORDER BY id", args)]

    def get(self, user_id: str, plan_id: int) -> dict[str, Any]:
        with self._connect() as conn:
            return self._get(conn, user_id, plan_id)

    def create(self, user_id: str, key: str, plan: PlanCreate) -> tuple[dict[str, Any], bool]:
        """The plan and whether it was a replay of ``key``."""
        fingerprint = _fingerprint("POST /plans", plan.model_dump())
        with self._connect() as conn:
            replay = self._replay(conn, user_id, key, fingerprint)
            if replay is not None:
                return replay, True
            now = _now()
            cursor = conn.execute(
                "INSERT INTO plans (user_id, title, description, due_date, status,"
                " idempotency_key, created_at, updated_at) VALUES (?, ?, ?, ?, 'draft', ?, ?, ?)",
                (user_id, plan.title, plan.description, plan.due_date, key, now, now),
            )
            plan_id = int(cursor.lastrowid or 0)
            self._remember(conn, user_id, key, fingerprint, plan_id)
            return self._get(conn, user_id, plan_id), False

    def set_status(
        self, user_id: str, plan_id: int, status: str, key: str | None
    ) -> tuple[dict[str, Any], bool]:
        fingerprint = _fingerprint(f"PATCH /plans/{plan_id}", {"status": status})
        with self._connect() as conn:
            if key is not None:
                replay = self._replay(conn, user_id, key, fingerprint)
                if replay is not None:
                    return replay, True
            self._get(conn, user_id, plan_id)
            conn.execute(
                "UPDATE plans SET status = ?, updated_at = ? WHERE id = ? AND user_id = ?",
                (status, _now(), plan_id, user_id),
            )
            if key is not None:
                self._remember(conn, user_id, key, fingerprint, plan_id)
            return self._get(conn, user_id, plan_id), False

    @staticmethod
    def _get(conn: sqlite3.Connection, user_id: str, plan_id: int) -> dict[str, Any]:
        row = conn.execute(
            "SELECT * FROM plans WHERE id = ? AND user_id = ?", (plan_id, user_id)
        ).fetchone()
        if row is None:
            raise ApiError(
                404,
                "PGRST116",
                f"plan {plan_id} not found",
                hint="list_plans shows the ids of your plans",
            )
        return dict(row)

    def _replay(
        self, conn: sqlite3.Connection, user_id: str, key: str, fingerprint: str
    ) -> dict[str, Any] | None:
        row = conn.execute(
            "SELECT fingerprint, plan_id FROM idempotency_keys WHERE user_id = ? AND key = ?",
            (user_id, key),
        ).fetchone()
        if row is None:
            return None
        if row["fingerprint"] != fingerprint:
            raise ApiError(
                409,
                "23505",
                "this Idempotency-Key was already used for a different request",
                details=f"Idempotency-Key {key!r}",
                hint="send a new Idempotency-Key for a new request",
            )
        return self._get(conn, user_id, row["plan_id"])

    @staticmethod
    def _remember(
        conn: sqlite3.Connection, user_id: str, key: str, fingerprint: str, plan_id: int
    ) -> None:
        conn.execute(
            "INSERT INTO idempotency_keys (user_id, key, fingerprint, plan_id, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (user_id, key, fingerprint, plan_id, _now()),
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fingerprint(route: str, payload: dict[str, Any]) -> str:
    text = route + json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _validation_details(errors: Any) -> list[dict[str, Any]]:
    return [
        {
            "field": ".".join(str(part) for part in err.get("loc", ()) if part != "body"),
            "message": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in errors
    ]


def create_app(db_path: Path, api_key: str, *, enable_test_hooks: bool = False) -> FastAPI:
    """The plans service over the SQLite file ``db_path``, accepting ``api_key``."""
    if not api_key:
        raise ValueError("the plans service needs an API key")
    store = PlanStore(db_path)
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
        fault = _next_fault(hooks) if enable_test_hooks else None
        if fault is not None and not fault.lose_response:
            response = _fault_response(fault)
        else:
            response = _authorize(request, api_key) or await call_next(request)
            if fault is not None:
                await _drain(response)  # the write is done; its answer is lost
                response = _fault_response(fault)
        if enable_test_hooks:
            entry["status"] = response.status_code
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


def _next_fault(hooks: TestHooks) -> Fault | None:
    with hooks.lock:
        return hooks.faults.popleft() if hooks.faults else None


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


def serve(host: str, port: int, db_path: Path, api_key: str) -> None:
    """Run the service in the foreground (``parley plans-service``)."""
    uvicorn.run(create_app(db_path, api_key), host=host, port=port, log_level="info")


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on ``host`` (port 0: a free one).

    For ``parley dev`` and tests: ``with BackgroundServer(app) as server: server.url``.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
