"""Pending calls expire after a configurable time: recorded `expired`, never run, the model
told. Runs the real workflow on the time-skipping test server, so 24 h pass in a moment.

The Java test server lacks some of the dev server's API: it has no ListSearchAttributes
(so ``worker.ensure_search_attributes`` cannot run there), but it implements
AddSearchAttributes, update-with-start, and queries from activities, which is all a
conversation needs. While a workflow task or an activity is outstanding the test server
holds its clock, so ``env.sleep`` returns only after the turn the deadline started has
come to rest: the assertions after it need no waiting.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import Decision
from parley.contracts.errors import ErrorType
from parley.worker.wiring import build_worker
from parley.workflows.conversation import ConversationWorkflow
from tests.support import call, registry
from tests.support.time_skipping import recording_script
from tests.support.transcripts import envelope_status, new_session, runs_in, tool_messages

PROPOSE_WRITE = {"content": "Shall I?", "tool_calls": [call("write_record", "c1", title="Q3")]}
AFTER_EXPIRY = {"content": "The write expired; ask again if you still want it."}


def settings(**fields: Any) -> Settings:
    return Settings(task_queue=f"parley-expiry-{uuid.uuid4().hex[:8]}", **fields)


async def test_pending_call_expires_after_24_hours_and_the_model_is_told(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    model = recording_script(PROPOSE_WRITE, AFTER_EXPIRY)
    config = settings()
    async with build_worker(env.client, config, registry=registry(), model=model):
        conversations = Conversations(env.client, config)
        sid = new_session()
        sent_at = await env.get_current_time()
        turn = await conversations.send(sid, "alice", "write Q3")
        assert [p.tool_call_id for p in turn.pending] == ["c1"]
        deadline = turn.pending[0].expires_at - sent_at
        assert timedelta(hours=24) <= deadline < timedelta(hours=24, minutes=1)

        await env.sleep(timedelta(hours=25))

        state = await conversations.state(sid, "alice")
        assert (state.status, state.pending) == ("idle", [])
        answer = tool_messages(state.transcript)["c1"]
        assert (answer.status, envelope_status(answer)) == ("error", "expired")
        assert "expired and did not run" in answer.content
        assert "24 h" in answer.content
        assert runs_in(sid, "write_record") == []
        assert state.counters.model_calls == 2
        told = model.inputs[1][-1]
        assert isinstance(told, ToolMessage) and told.content == answer.content
        assert state.last_turn is not None
        assert (state.last_turn.status, state.last_turn.reply) == (
            "completed",
            AFTER_EXPIRY["content"],
        )
        assert [(r.tool_call_id, r.status) for r in state.last_turn.results] == [("c1", "expired")]
        assert [a.event for a in state.audit if a.tool_call_id == "c1"] == ["proposed", "expired"]

        # nothing is owed any more: a late decision is refused and runs nothing
        with pytest.raises(ConversationRefused) as late:
            await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
        assert late.value.error_type == ErrorType.NO_DECISIONS_OWED
        assert runs_in(sid, "write_record") == []

        # the deadline's timer and the expiry turn replay deterministically
        history = await conversations.handle(sid).fetch_history()
        replayer = Replayer(
            workflows=[ConversationWorkflow], data_converter=env.client.data_converter
        )
        assert (await replayer.replay_workflow(history)).replay_failure is None


async def test_a_decision_before_the_deadline_still_runs(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    config = settings()
    model = recording_script(PROPOSE_WRITE, {"content": "Written."})
    async with build_worker(env.client, config, registry=registry(), model=model):
        conversations = Conversations(env.client, config)
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        await env.sleep(timedelta(hours=23))

        state = await conversations.state(sid, "alice")
        assert [p.tool_call_id for p in state.pending] == ["c1"]
        turn = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="c1", action="approve")]
        )
        assert (turn.status, turn.reply) == ("completed", "Written.")
        assert len(runs_in(sid, "write_record")) == 1
        answer = tool_messages((await conversations.state(sid, "alice")).transcript)["c1"]
        assert envelope_status(answer) == "success"


async def test_expiry_is_configurable(time_skipping_env: WorkflowEnvironment) -> None:
    env = time_skipping_env
    config = settings(pending_expiry_seconds=3600)  # becomes ConversationStart's field
    model = recording_script(PROPOSE_WRITE, AFTER_EXPIRY)
    async with build_worker(env.client, config, registry=registry(), model=model):
        conversations = Conversations(env.client, config)
        sid = new_session()
        sent_at = await env.get_current_time()
        turn = await conversations.send(sid, "alice", "write Q3")
        assert turn.pending[0].expires_at - sent_at < timedelta(hours=1, minutes=1)

        await env.sleep(timedelta(hours=2))

        state = await conversations.state(sid, "alice")
        assert (state.status, state.pending) == ("idle", [])
        answer = tool_messages(state.transcript)["c1"]
        assert envelope_status(answer) == "expired"
        assert "within 1 h" in answer.content
        assert runs_in(sid, "write_record") == []


async def test_the_deadline_timer_is_kept_across_confirmed_turns(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    """Two confirmed turns start one timer and cancel none (the timer set for the first
    call covers the second's later deadline), and the third call, left pending, still
    expires at its own deadline: the kept timer rings early, finds nothing due, and is
    set again for it."""
    env = time_skipping_env
    second = {"content": "Again?", "tool_calls": [call("write_record", "c2", title="Q4")]}
    third = {"content": "Once more?", "tool_calls": [call("write_record", "c3", title="Q5")]}
    model = recording_script(
        PROPOSE_WRITE,
        {"content": "Written."},
        second,
        {"content": "Written."},
        third,
        AFTER_EXPIRY,
    )
    config = settings()
    async with build_worker(env.client, config, registry=registry(), model=model):
        conversations = Conversations(env.client, config)
        sid = new_session()
        for tool_call_id in ("c1", "c2"):
            await conversations.send(sid, "alice", "write it")
            await env.sleep(timedelta(hours=1))
            done = await conversations.decide(
                sid, "alice", [Decision(tool_call_id=tool_call_id, action="approve")]
            )
            assert done.status == "completed"
        await conversations.send(sid, "alice", "write it")
        history = await conversations.handle(sid).fetch_history()
        kinds = [event.WhichOneof("attributes") for event in history.events]
        assert kinds.count("timer_started_event_attributes") == 1
        assert kinds.count("timer_canceled_event_attributes") == 0

        await env.sleep(timedelta(hours=25))  # past the third call's deadline

        state = await conversations.state(sid, "alice")
        assert (state.status, state.pending) == ("idle", [])
        assert envelope_status(tool_messages(state.transcript)["c3"]) == "expired"
        assert [len(runs_in(sid, "write_record"))] == [2]
        history = await conversations.handle(sid).fetch_history()
        replayer = Replayer(
            workflows=[ConversationWorkflow], data_converter=env.client.data_converter
        )
        assert (await replayer.replay_workflow(history)).replay_failure is None
