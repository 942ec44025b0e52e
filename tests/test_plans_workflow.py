"""Issue 3 end to end: whole conversations that use the plans toolset, on a real worker
and the real Temporal dev server, against the real plans service on 127.0.0.1.

The model is the offline ``ScriptedChatModel``; tools, HTTP, the backend and Temporal are
real. Faults are injected through the service's test hooks, and retries are read back
from the workflow history, where Temporal recorded them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import ToolMessage
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHandle

from parley.client import Conversations
from parley.contracts import RUN_TOOL, Decision, TurnResult
from parley.errors import ErrorType
from parley.models.scripted import FIXED_NOTE, ScriptedChatModel
from parley.plans_service import BackgroundServer, create_app
from parley.tools import ToolRegistry
from parley.toolsets.plans import build_plans_toolset
from tests.checks import new_session, tool_messages

#: Every secret these tests hand to a worker contains this marker, so one search of a
#: history finds any of them.
SECRET_MARKER = "PSECRET"
PLANS_KEY = f"plans-key-{SECRET_MARKER}-5b1d0e"
WRONG_PLANS_KEY = f"wrong-plans-key-{SECRET_MARKER}-77c2a9"
USER = "maria.k-42"
SENTENCE = "please create a plan called Q3 review for next week"


@pytest.fixture
def plans(tmp_path: Path) -> Iterator[BackgroundServer]:
    app = create_app(tmp_path / "plans.db", PLANS_KEY, enable_test_hooks=True)
    with BackgroundServer(app) as running:
        yield running


def plans_registry(server: BackgroundServer, api_key: str = PLANS_KEY) -> ToolRegistry:
    return ToolRegistry(build_plans_toolset(server.url, api_key))


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
            except (binascii.Error, UnicodeDecodeError):
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


async def test_create_plan_waits_for_approval_then_creates_the_normalized_plan(
    parley_worker, plans: BackgroundServer
) -> None:
    sid = new_session()
    async with parley_worker(plans_registry(plans), ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, SENTENCE)
        assert turn.status == "awaiting_approval"
        [pending] = turn.pending
        assert (pending.name, pending.args) == ("create_plan", {"title": SENTENCE})
        assert rows(plans) == []  # nothing is written before the decision

        done = await conversations.decide(sid, USER, approve(turn))

        assert done.status == "completed"
        [row] = rows(plans)
        assert row["title"] == "Q3 review"
        assert SENTENCE in row["description"]
        assert row["user_id"] == USER

        page = await conversations.events(sid, USER)
        [result] = [e.event for e in page.events if e.event["type"] == "TOOL_CALL_RESULT"]
        assert result["toolCallId"] == pending.tool_call_id
        envelope = json.loads(result["content"])  # one JSON document: the envelope
        assert set(envelope) == {"status", "content", "payload", "error"}
        assert envelope["status"] == "success"
        assert envelope["error"] is None
        assert envelope["payload"]["id"] == row["id"]
        assert envelope["payload"]["title"] == "Q3 review"
        assert json.loads(envelope["content"]) == envelope["payload"]
        assert done.results[0].payload == envelope["payload"]


async def test_a_lost_response_is_retried_with_the_same_key_and_creates_one_plan(
    parley_worker, plans: BackgroundServer
) -> None:
    sid = new_session()
    async with parley_worker(plans_registry(plans), ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, "create a plan called Launch checklist")
        [pending] = turn.pending
        # The service commits the row, then its answer is lost (a 500 instead).
        inject_faults(plans, {"status": 500, "lose_response": True})

        done = await conversations.decide(sid, USER, approve(turn))

        assert done.status == "completed"
        assert [r.status for r in done.results] == ["success"]
        [row] = rows(plans)
        assert row["title"] == "Launch checklist"
        assert done.results[0].payload["id"] == row["id"]

        key = f"conversation-{sid}:{pending.tool_call_id}"
        posts = [r for r in seen_requests(plans) if r["method"] == "POST"]
        assert [(r["idempotency_key"], r["status"]) for r in posts] == [(key, 500), (key, 200)]
        assert row["idempotency_key"] == key

        assert activity_attempts(await fetch(conversations, sid), RUN_TOOL) == [2]


async def test_a_422_goes_back_to_the_model_which_corrects_its_call(
    parley_worker, plans: BackgroundServer
) -> None:
    created = create_row(plans, "Hiring")
    sid = new_session()
    async with parley_worker(plans_registry(plans), ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, f"mark plan {created['id']} as finished")
        [first] = turn.pending
        assert first.args == {"plan_id": created["id"], "status": "finished"}

        corrected = await conversations.decide(sid, USER, approve(turn))

        # The 422 did not fail the turn: the model read it and proposed a fixed call.
        assert corrected.status == "awaiting_approval"
        [failed] = corrected.results
        assert failed.status == "error"
        assert failed.error is not None
        assert failed.error.type == ErrorType.TOOL_INPUT
        assert failed.error.http_status == 422
        assert failed.error.body["code"] == "22023"
        assert corrected.reply == FIXED_NOTE
        [second] = corrected.pending
        assert second.args == {"plan_id": created["id"], "status": "done"}
        assert second.tool_call_id != first.tool_call_id

        done = await conversations.decide(sid, USER, approve(corrected))

        assert done.status == "completed"
        assert [r.status for r in done.results] == ["success"]
        assert rows(plans)[0]["status"] == "done"
        state = await conversations.state(sid, USER)
        answers = tool_messages(state.transcript)
        message = answers[first.tool_call_id]
        assert message.content.startswith("Error: status: Input should be")
        assert message.content.endswith("Please fix your mistakes.")
        assert [r["status"] for r in seen_requests(plans) if r["method"] == "PATCH"] == [422, 200]


async def test_a_refused_api_key_is_a_neutral_tool_error_without_the_key(
    parley_worker, plans: BackgroundServer
) -> None:
    sid = new_session()
    registry = plans_registry(plans, api_key=WRONG_PLANS_KEY)
    async with parley_worker(registry, ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, "list my plans")

        assert turn.status == "completed"  # the model was told, the turn went on
        [result] = turn.results
        assert result.status == "error"
        assert result.error is not None
        assert result.error.type == ErrorType.TOOL_PERMISSION
        assert result.error.http_status == 401
        assert result.error.body["code"] == "PGRST301"
        assert result.error.body["message"] == "the API key is missing or not valid"

        state = await conversations.state(sid, USER)
        [message] = [m for m in state.transcript if isinstance(m, ToolMessage)]
        assert message.content == (
            "Error: the plans service refused the worker's credentials (HTTP 401)"
        )
        assert "Please fix" not in message.content
        assert WRONG_PLANS_KEY not in turn.model_dump_json()
        assert WRONG_PLANS_KEY not in state.model_dump_json()
        assert SECRET_MARKER not in history_text(await fetch(conversations, sid))
        assert [r["status"] for r in seen_requests(plans)] == [401]  # not retried


async def test_a_500_then_200_is_retried_to_one_plan(
    parley_worker, plans: BackgroundServer
) -> None:
    sid = new_session()
    async with parley_worker(plans_registry(plans), ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, "create a plan called Budget 2026")
        inject_faults(plans, {"status": 500})

        done = await conversations.decide(sid, USER, approve(turn))

        assert done.status == "completed"
        assert [r.status for r in done.results] == ["success"]
        assert [r["title"] for r in rows(plans)] == ["Budget 2026"]
        posts = [r for r in seen_requests(plans) if r["method"] == "POST"]
        assert [r["status"] for r in posts] == [500, 201]
        assert len({r["idempotency_key"] for r in posts}) == 1
        assert activity_attempts(await fetch(conversations, sid), RUN_TOOL) == [2]


async def test_the_backend_sees_the_real_user_on_every_request(
    parley_worker, plans: BackgroundServer
) -> None:
    sid = new_session()
    async with parley_worker(plans_registry(plans), ScriptedChatModel()) as conversations:
        created = await conversations.decide(
            sid, USER, approve(await conversations.send(sid, USER, SENTENCE))
        )
        plan_id = created.results[0].payload["id"]
        assert (await conversations.send(sid, USER, "list my plans")).status == "completed"
        assert (await conversations.send(sid, USER, f"show plan {plan_id}")).status == ("completed")
        marked = await conversations.send(sid, USER, f"mark plan {plan_id} as done")
        assert (await conversations.decide(sid, USER, approve(marked))).status == "completed"

    requests = seen_requests(plans)
    assert {(r["method"], r["path"]) for r in requests} == {
        ("POST", "/plans"),
        ("GET", "/plans"),
        ("GET", f"/plans/{plan_id}"),
        ("PATCH", f"/plans/{plan_id}"),
    }
    assert [r["user"] for r in requests] == [USER] * len(requests)
    assert all(r["status"] in (200, 201) for r in requests)


async def test_no_workflow_history_holds_an_api_key(client: Client) -> None:
    """Last in this module: every history the session has written so far, the failed
    401 conversations included, is free of every key these tests gave a worker."""
    histories = await every_history(client)
    assert histories, "the tests above ran conversations"
    leaked = sorted(wid for wid, text in histories.items() if SECRET_MARKER in text)
    assert leaked == []
