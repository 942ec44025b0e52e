"""Whole conversations that use the plans toolset, on a real worker and the real
Temporal dev server, against the real plans service on 127.0.0.1: a write waits for
approval, faults are retried by Temporal, secrets stay out of history.

The model is the offline ``ScriptedChatModel``; tools, HTTP, the backend and Temporal are
real. Faults are injected through the service's test hooks, and retries are read back
from the workflow history, where Temporal recorded them.
"""

from __future__ import annotations

import json

from langchain_core.messages import ToolMessage
from temporalio.client import Client

from parley.activities.models.scripted import FIXED_NOTE, ScriptedChatModel
from parley.contracts import RUN_TOOL
from parley.contracts.errors import ErrorType
from parley.services.plans import BackgroundServer
from tests.support.plans import (
    SECRET_MARKER,
    SENTENCE,
    USER,
    WRONG_PLANS_KEY,
    activity_attempts,
    approve,
    create_row,
    every_history,
    fetch,
    history_text,
    inject_faults,
    plans_registry,
    rows,
    seen_requests,
)
from tests.support.transcripts import new_session, tool_messages


async def test_create_plan_waits_for_approval_then_creates_the_normalized_plan(
    parley_worker, plans: BackgroundServer
) -> None:
    sid = new_session()
    async with parley_worker(plans_registry(plans), ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, SENTENCE)
        assert turn.status == "awaiting_approval"
        [pending] = turn.pending
        # the user approves what will run: the normalized title, the sentence kept
        assert pending.name == "create_plan"
        assert pending.args == {
            "title": "Q3 review",
            "description": f"Original request: {SENTENCE}",
        }
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
        inject_faults(plans, {"status": 500, "lose_response": True, "method": "POST"})

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
        inject_faults(plans, {"status": 500, "method": "POST"})

        done = await conversations.decide(sid, USER, approve(turn))

        assert done.status == "completed"
        assert [r.status for r in done.results] == ["success"]
        assert [r["title"] for r in rows(plans)] == ["Budget 2026"]
        posts = [r for r in seen_requests(plans) if r["method"] == "POST"]
        assert [r["status"] for r in posts] == [500, 201]
        assert len({r["idempotency_key"] for r in posts}) == 1
        assert activity_attempts(await fetch(conversations, sid), RUN_TOOL) == [2]


async def test_a_timeout_then_a_500_then_success_creates_one_plan(
    parley_worker, plans: BackgroundServer
) -> None:
    """The nastiest order: the first request times out on our side while the slow
    backend still commits it, the retry meets a 500, the next succeeds. The same
    idempotency key on all three makes it one plan."""
    sid = new_session()
    registry = plans_registry(plans, timeout=1.0)
    async with parley_worker(registry, ScriptedChatModel()) as conversations:
        turn = await conversations.send(sid, USER, "create a plan called Budget 2027")
        inject_faults(
            plans, {"status": 0, "delay": 2.0, "method": "POST"}, {"status": 500, "method": "POST"}
        )

        done = await conversations.decide(sid, USER, approve(turn))

        assert done.status == "completed"
        assert [r.status for r in done.results] == ["success"]
        assert [r["title"] for r in rows(plans)] == ["Budget 2027"]
        posts = [r for r in seen_requests(plans) if r["method"] == "POST"]
        assert len(posts) == 3 and len({r["idempotency_key"] for r in posts}) == 1
        assert activity_attempts(await fetch(conversations, sid), RUN_TOOL) == [3]


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
