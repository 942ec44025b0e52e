"""The plans and their rules: SQLite storage, one user per row, idempotent writes,
and the PostgREST-style errors the service answers with."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

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
