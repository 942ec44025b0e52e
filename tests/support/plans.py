"""Helpers for the plans tests: the reference service in a thread (``plans_service``, and
the ``plans`` fixture: one for the test, with ``PLANS_KEY``; this module is registered
as a plugin in tests/conftest.py), its request log and fault hooks, and reading workflow
histories (attempts, payloads decoded for secrets). Client side."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHandle

from parley.activities.toolsets.plans import build_plans_toolset
from parley.client import Conversations
from parley.contracts import Decision, TurnResult
from parley.services.plans import BackgroundServer, create_app
from parley.tools import ToolRegistry

#: Every secret these tests hand to a worker contains this marker, so one search of a
#: history finds any of them.
SECRET_MARKER = "PSECRET"
PLANS_KEY = f"plans-key-{SECRET_MARKER}-5b1d0e"
WRONG_PLANS_KEY = f"wrong-plans-key-{SECRET_MARKER}-77c2a9"
USER = "maria.k-42"
SENTENCE = "please create a plan called Q3 review for next week"


@contextmanager
def plans_service(data_dir: Path, api_key: str = PLANS_KEY) -> Iterator[BackgroundServer]:
    """The reference plans service on 127.0.0.1 (in a thread), its database in
    ``data_dir``, its test hooks (faults, request log) on."""
    with BackgroundServer(
        create_app(data_dir / "plans.db", api_key, enable_test_hooks=True)
    ) as running:
        yield running


@pytest.fixture
def plans(tmp_path: Path) -> Iterator[BackgroundServer]:
    """The test's own plans service (``plans_service``), its key ``PLANS_KEY``."""
    with plans_service(tmp_path) as running:
        yield running


def plans_registry(
    server: BackgroundServer, api_key: str = PLANS_KEY, *, timeout: float = 10.0
) -> ToolRegistry:
    return ToolRegistry(build_plans_toolset(server.url, api_key, timeout=timeout))


def inject_faults(server: BackgroundServer, *faults: dict[str, Any]) -> None:
    """Queue answers for the service's next requests."""
    httpx.post(f"{server.url}/_test/faults", json={"faults": list(faults)}).raise_for_status()


def seen_requests(server: BackgroundServer) -> list[dict[str, Any]]:
    return httpx.get(f"{server.url}/_test/requests").json()


def rows(server: BackgroundServer, user: str = USER) -> list[dict[str, Any]]:
    """The user's plans, read straight from the service (not through Parley)."""
    response = httpx.get(
        f"{server.url}/plans",
        headers={"Authorization": f"Bearer {PLANS_KEY}", "X-Parley-User": user},
    )
    response.raise_for_status()
    return response.json()


def create_row(server: BackgroundServer, title: str, user: str = USER) -> dict[str, Any]:
    """A plan created straight on the service, as set-up."""
    response = httpx.post(
        f"{server.url}/plans",
        json={"title": title},
        headers={
            "Authorization": f"Bearer {PLANS_KEY}",
            "X-Parley-User": user,
            "Idempotency-Key": f"setup-{title}",
        },
    )
    response.raise_for_status()
    return response.json()


def approve(turn: TurnResult) -> list[Decision]:
    return [Decision(tool_call_id=p.tool_call_id, action="approve") for p in turn.pending]


# --- reading workflow histories ---------------------------------------------------


def activity_attempts(history: History, activity_name: str) -> list[int]:
    """The attempt of each started ``activity_name`` execution, in order. Temporal writes
    ActivityTaskStarted once per execution, carrying the attempt that finished it."""
    names: dict[int, str] = {}
    attempts: list[int] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            names[event.event_id] = scheduled.activity_type.name
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if names.get(started.scheduled_event_id) == activity_name:
                attempts.append(started.attempt)
    return attempts


def history_text(history: History) -> str:
    """The history as JSON, plus every base64 payload in it decoded: payload data (inputs,
    results, failure details) is stored base64-encoded, where a plain search misses it."""
    raw = history.to_json()
    decoded: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and len(value) >= 8:
            try:
                decoded.append(base64.b64decode(value, validate=True).decode("utf-8"))
            except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8
                pass

    walk(json.loads(raw))
    return "\n".join([raw, *decoded])


async def every_history(client: Client, known: Iterable[str] = ()) -> dict[str, str]:
    """The text of every workflow history in the namespace (and of ``known`` ids, in case
    visibility lags), by workflow id."""
    ids = {execution.id async for execution in client.list_workflows()} | set(known)
    return {
        workflow_id: history_text(await client.get_workflow_handle(workflow_id).fetch_history())
        for workflow_id in sorted(ids)
    }


async def fetch(conversations: Conversations, session_id: str) -> History:
    handle: WorkflowHandle[Any, Any] = conversations.handle(session_id)
    return await handle.fetch_history()


# --- the acceptance ------------------------------------------------------------------
