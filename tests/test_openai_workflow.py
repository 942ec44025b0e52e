"""Whole conversations with ``PARLEY_MODEL=openai:<model>``: their model is
langchain-openai talking to ``FakeOpenAI``, a real chat-completions server on
127.0.0.1, through a real worker on the real Temporal dev server.

Retries are Temporal's (the SDK's are off): the tests count the ``call_model`` attempts
in the workflow history and the HTTP requests the fake received, and expect them equal.
"""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client

from parley.activities.toolsets.plans import build_plans_toolset
from parley.contracts import CALL_MODEL, RUN_TOOL, Decision
from parley.contracts.errors import ErrorType
from parley.services.plans import BackgroundServer
from parley.tools import ToolRegistry
from tests.support import registry
from tests.support.openai_env import openai_model
from tests.support.openai_fake import OVERLOAD_2064, FakeOpenAI, error_body
from tests.support.plans import (
    PLANS_KEY,
    SECRET_MARKER,
    activity_attempts,
    approve,
    every_history,
    fetch,
    rows,
)
from tests.support.provider_runs import script_a_write
from tests.support.transcripts import new_session, runs_in, tool_messages

OPENAI_KEY = f"sk-openai-{SECRET_MARKER}-c0ffee51"
WRONG_OPENAI_KEY = f"sk-revoked-{SECRET_MARKER}-dead99"
USER = "ola.n"


pytestmark = pytest.mark.fake_openai(api_key=OPENAI_KEY)


async def test_a_whole_conversation_through_openai(parley_worker, fake: FakeOpenAI) -> None:
    script_a_write(fake, "call_w1")
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        turn = await conversations.send(sid, USER, "write a record Q3")
        assert turn.status == "awaiting_approval"
        assert [(p.tool_call_id, p.name, p.args) for p in turn.pending] == [
            ("call_w1", "write_record", {"title": "Q3"})
        ]
        assert fake.attempts == 1
        offered = {t["function"]["name"]: t["function"] for t in fake.last_request.body["tools"]}
        assert "write_record" in offered
        assert "context" not in offered["write_record"]["parameters"]["properties"]
        assert runs_in(sid, "write_record") == []

        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="call_w1", action="approve")]
        )

        assert done.status == "completed"
        assert done.reply == "Written: Q3."
        assert [r["user_id"] for r in runs_in(sid, "write_record")] == [USER]
        assert fake.attempts == 2
        sent = fake.last_request.messages
        assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
        assert sent[1]["tool_calls"][0]["id"] == "call_w1"
        assert sent[2]["tool_call_id"] == "call_w1"
        assert json.loads(sent[2]["content"]) == {"written": "Q3", "by": USER}
        assert all(r.headers["authorization"] == f"Bearer {OPENAI_KEY}" for r in fake.requests)
        tool_messages((await conversations.state(sid, USER)).transcript)


async def test_rate_limits_and_overloads_are_retried_by_temporal(
    parley_worker, fake: FakeOpenAI
) -> None:
    # Small Retry-After values keep the test fast; the overload in a 200 has no headers
    # to read, so it goes first, where the policy's initial interval (1 s) applies.
    fake.error(200, OVERLOAD_2064)
    fake.error(400, OVERLOAD_2064, retry_after=1)
    rate_limited = error_body("Rate limit reached", type="requests", code="rate_limit_exceeded")
    fake.error(429, rate_limited, retry_after=1)
    fake.error(429, rate_limited, retry_after=1)
    failures = 4
    fake.reply("Hello after the storm.")
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        turn = await conversations.send(sid, USER, "hello")

        assert turn.status == "completed"
        assert turn.reply == "Hello after the storm."
        history = await fetch(conversations, sid)
        assert activity_attempts(history, CALL_MODEL) == [failures + 1]
        assert fake.attempts == failures + 1
        assert fake.pending == 0
        last_failure = next(
            e.activity_task_started_event_attributes.last_failure
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
            and e.activity_task_started_event_attributes.attempt == failures + 1
        )
        assert last_failure.application_failure_info.type == ErrorType.MODEL_TRANSIENT
        assert "rate limiting" in last_failure.message


async def test_a_refused_api_key_fails_the_turn_once_and_clearly(
    parley_worker, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", WRONG_OPENAI_KEY)  # the fake echoes it in its 401
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        turn = await conversations.send(sid, USER, "hello")

        assert turn.status == "failed"
        assert turn.error is not None
        assert "refused the API key" in turn.error
        assert "HTTP 401" in turn.error
        assert WRONG_OPENAI_KEY not in turn.error
        assert fake.attempts == 1
        history = await fetch(conversations, sid)
        assert activity_attempts(history, CALL_MODEL) == [1]
        page = await conversations.events(sid, USER)
        [error] = [e.event for e in page.events if e.event["type"] == "RUN_ERROR"]
        assert error["code"] == ErrorType.MODEL_REQUEST
        assert "refused the API key" in error["message"]
        state = await conversations.state(sid, USER)
        assert state.status == "failed"
        assert state.counters.model_calls == 1  # not called again by itself


async def test_no_history_holds_the_openai_or_plans_key(
    parley_worker, fake: FakeOpenAI, plans: BackgroundServer, client: Client
) -> None:
    """Both secrets on one worker, a write that runs, then every history the session has
    written (the 401 conversations included) is searched for any key."""
    fake.reply(tool_calls=[{"name": "create_plan", "args": {"title": "Q4 offsite"}, "id": "p1"}])
    fake.reply("Your plan Q4 offsite is created.")
    sid = new_session()
    tools = ToolRegistry(build_plans_toolset(plans.url, PLANS_KEY))
    async with parley_worker(tools, openai_model()) as conversations:
        turn = await conversations.send(sid, USER, "plan the Q4 offsite")
        done = await conversations.decide(sid, USER, approve(turn))
        assert done.status == "completed"
        assert [r["title"] for r in rows(plans, USER)] == ["Q4 offsite"]
        assert activity_attempts(await fetch(conversations, sid), RUN_TOOL) == [1]

    histories = await every_history(client, known=[conversations.handle(sid).id])
    assert f"conversation-{sid}" in histories
    leaked = sorted(wid for wid, text in histories.items() if SECRET_MARKER in text)
    assert leaked == []


async def test_tool_call_ids_a_provider_reuses_are_made_unique(
    parley_worker, fake: FakeOpenAI
) -> None:
    """Ollama and vLLM number tool calls from call_0 again every turn."""
    for title in ("first", "second"):
        fake.reply(
            "", tool_calls=[{"name": "write_record", "args": {"title": title}, "id": "call_0"}]
        )
        fake.reply(f"wrote {title}")
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        ids = []
        for title in ("first", "second"):
            turn = await conversations.send(sid, USER, f"write {title}")
            (pending,) = turn.pending
            ids.append(pending.tool_call_id)
            await conversations.decide(
                sid, USER, [Decision(tool_call_id=pending.tool_call_id, action="approve")]
            )
        assert ids[0] == "call_0" and ids[1] != "call_0"
        runs = runs_in(sid, "write_record")
        assert [r["title"] for r in runs] == ["first", "second"]
        assert len({r["key"] for r in runs}) == 2  # distinct idempotency keys
        # the provider sees the ids Parley uses, consistently
        tool_ids = [m["tool_call_id"] for m in fake.last_request.messages if m["role"] == "tool"]
        assert tool_ids == ids
        state = await conversations.state(sid, USER)
        tool_messages(state.transcript)


async def test_tool_calls_with_unparseable_arguments_go_back_to_the_model(
    parley_worker, fake: FakeOpenAI
) -> None:
    """A provider that emits broken JSON arguments: the model is told, and can retry."""
    fake.reply("", tool_calls=[{"name": "write_record", "args": '{"title": "Q3"', "id": "bad"}])
    fake.reply("", tool_calls=[{"name": "write_record", "args": {"title": "Q3"}, "id": "good"}])
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        turn = await conversations.send(sid, USER, "write Q3")
        assert [p.tool_call_id for p in turn.pending] == ["good"]
        (refused,) = turn.results
        assert refused.tool_call_id == "bad" and refused.status == "error"
        assert refused.content.startswith("Error: the arguments of write_record could not be")
        assert refused.content.endswith("Please fix your mistakes.")
        # the provider got a valid transcript: the broken call and its answer
        tool_ids = [m["tool_call_id"] for m in fake.last_request.messages if m["role"] == "tool"]
        assert tool_ids == ["bad"]
        assert runs_in(sid, "write_record") == []
