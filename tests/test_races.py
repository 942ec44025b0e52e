"""Races at the gate: concurrent messages and decisions, a decision that arrives with its
deadline already past, and client retries across continue-as-new."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from parley.activities.tool_calls import ToolActivities
from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import Decision, RunToolInput
from parley.contracts.errors import ErrorType
from parley.tools import ToolRegistry, confirm, deny
from parley.worker.wiring import build_worker
from tests.support import GATE, SLOW_STARTED, call, drop_tables, registry, script, write_record
from tests.support.transcripts import new_session, runs_in, tool_messages

WRITE = {"content": "", "tool_calls": [call("write_record", "c1", title="once")]}


async def test_a_message_while_a_turn_runs_is_refused(parley_worker) -> None:
    GATE.clear()
    SLOW_STARTED.clear()
    model = script({"content": "", "tool_calls": [call("slow_read", "r1")]}, {"content": "ok"})
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "lee", "read slowly"))
        await SLOW_STARTED.wait()  # the tool has started: the turn is running
        with pytest.raises(ConversationRefused) as refused:
            await conv.send(sid, "lee", "and now this")
        assert refused.value.error_type == ErrorType.TURN_IN_PROGRESS
        GATE.set()
        assert (await first).reply == "ok"


async def test_two_racing_decisions_run_the_call_once(parley_worker) -> None:
    async with parley_worker(registry(), script(WRITE, {"content": "done"})) as conv:
        sid = new_session()
        await conv.send(sid, "mo", "write once")
        approve = [Decision(tool_call_id="c1", action="approve")]
        outcomes = await asyncio.gather(
            conv.decide(sid, "mo", approve, update_id="first"),
            conv.decide(sid, "mo", approve, update_id="second"),
            return_exceptions=True,
        )
        refusals = [o for o in outcomes if isinstance(o, ConversationRefused)]
        results = [o for o in outcomes if not isinstance(o, Exception)]
        assert len(results) == 1 and len(refusals) == 1, outcomes
        assert refusals[0].error_type in (ErrorType.TURN_IN_PROGRESS, ErrorType.NO_DECISIONS_OWED)
        assert len(runs_in(sid, "write_record")) == 1
        tool_messages((await conv.state(sid, "mo")).transcript)


async def test_a_decision_after_the_deadline_never_runs(client: Client) -> None:
    """The worker is down when the deadline passes; the approval arrives first."""
    settings = Settings(task_queue=f"parley-late-{uuid.uuid4().hex[:8]}", pending_expiry_seconds=1)
    conv = Conversations(client, settings)
    sid = new_session()
    async with build_worker(
        client, settings, registry=registry(), model=script(WRITE, {"content": "told"})
    ):
        turn = await conv.send(sid, "nia", "write once")
        assert turn.status == "awaiting_approval"
    await asyncio.sleep(2)  # past the deadline, with no worker to fire the timer
    late = asyncio.create_task(
        conv.decide(sid, "nia", [Decision(tool_call_id="c1", action="approve")])
    )
    async with build_worker(
        client, settings, registry=registry(), model=script(WRITE, {"content": "told"})
    ):
        with pytest.raises(ConversationRefused) as refused:
            await late
        assert "expired" in refused.value.message
        assert runs_in(sid, "write_record") == []
        state = await conv.state(sid, "nia")
        answer = tool_messages(state.transcript)["c1"]
        assert answer.artifact["status"] == "expired"


async def test_client_retries_are_answered_once_across_continue_as_new(parley_worker) -> None:
    model = script(WRITE, {"content": "written"})
    async with parley_worker(registry(), model, continue_as_new_after_events=1) as conv:
        sid = new_session()
        first = await conv.send(sid, "oz", "write once", message_id="m-1")
        run_before = (await conv.handle(sid).describe()).run_id
        again = await conv.send(sid, "oz", "write once", message_id="m-1")
        assert again == first
        decided = await conv.decide(
            sid, "oz", [Decision(tool_call_id="c1", action="approve")], update_id="d-1"
        )
        retried = await conv.decide(
            sid, "oz", [Decision(tool_call_id="c1", action="approve")], update_id="d-1"
        )
        assert retried == decided
        assert (await conv.handle(sid).describe()).run_id != run_before  # it did continue
        state = await conv.state(sid, "oz")
        assert state.counters.turns == 1
        assert len(runs_in(sid, "write_record")) == 1


async def test_the_worker_refuses_a_confirm_or_deny_tool_without_a_decision() -> None:
    """Defence in depth: whatever the workflow's catalogue said, this worker's policy wins."""
    activities = ToolActivities(ToolRegistry([confirm(write_record), deny(drop_tables)]))
    env = ActivityEnvironment()
    env.payload_converter = pydantic_data_converter.payload_converter  # as the worker runs
    for name, approved_by in [("write_record", None), ("drop_tables", "u")]:
        with pytest.raises(ApplicationError) as refused:
            await env.run(
                activities.run_tool,
                RunToolInput(
                    name=name,
                    args={"title": "x"} if name == "write_record" else {},
                    tool_call_id="c",
                    user_id="u",
                    approved_by=approved_by,
                ),
            )
        assert refused.value.type == ErrorType.TOOL_FAILED and refused.value.non_retryable
    done = await env.run(
        activities.run_tool,
        RunToolInput(
            name="write_record", args={"title": "x"}, tool_call_id="c", user_id="u", approved_by="u"
        ),
    )
    assert done.result.status == "success"
