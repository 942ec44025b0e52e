"""Long conversations continue-as-new carrying their whole state, and `end` answers
what is still pending so the transcript stays valid."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage
from temporalio.client import WorkflowExecutionStatus

from parley.contracts import Decision
from tests.support import call, registry, script
from tests.support.transcripts import envelope_status, new_session, runs_in, tool_messages


async def test_state_and_pending_calls_survive_continue_as_new(parley_worker, client) -> None:
    model = script(
        {"content": "hello"},
        {"content": "", "tool_calls": [call("write_record", "c1", title="kept")]},
        {"content": "written"},
        {"content": "still here"},
    )
    async with parley_worker(registry(), model, continue_as_new_after_events=20) as conv:
        sid = new_session()
        first = await conv.send(sid, "erin", "hi")
        assert first.reply == "hello"
        first_run = (await conv.handle(sid).describe()).run_id

        turn = await conv.send(sid, "erin", "write it")
        assert turn.status == "awaiting_approval"
        result = await conv.decide(sid, "erin", [Decision(tool_call_id="c1", action="approve")])
        assert result.reply == "written"
        assert len(runs_in(sid, "write_record")) == 1

        last = await conv.send(sid, "erin", "are you there?")
        assert last.reply == "still here"

        state = await conv.state(sid, "erin")
        humans = [m.content for m in state.transcript if isinstance(m, HumanMessage)]
        assert humans == ["hi", "write it", "are you there?"]
        assert envelope_status(tool_messages(state.transcript)["c1"]) == "success"
        assert state.counters.turns == 3 and state.counters.model_calls == 4
        events = await conv.events(sid, "erin")
        assert [e.offset for e in events.events] == list(range(state.event_count))

        # earlier runs closed as continued-as-new; the conversation is one workflow id
        runs = [
            w
            async for w in conv.handle(sid)._client.list_workflows(
                f"WorkflowId = 'conversation-{sid}'"
            )
        ]
        assert len(runs) >= 2
        assert first_run in {w.run_id for w in runs}
        assert WorkflowExecutionStatus.CONTINUED_AS_NEW in {w.status for w in runs}


async def test_end_answers_pending_calls_without_running_them(parley_worker) -> None:
    model = script({"content": "", "tool_calls": [call("write_record", "c1", title="never")]})
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        await conv.send(sid, "fay", "write")
        await conv.end(sid, "fay")
        snapshot = await conv.handle(sid).result()
        assert snapshot.status == "ended" and snapshot.pending == []
        answer = tool_messages(snapshot.transcript)["c1"]
        assert envelope_status(answer) == "expired"
        assert "ended before anyone decided" in str(answer.content)
        assert runs_in(sid, "write_record") == []


async def test_a_tiny_threshold_continues_as_new_once_per_turn_not_in_a_loop(
    parley_worker,
) -> None:
    """PARLEY_CONTINUE_AS_NEW_AFTER_EVENTS=1: a fresh run already has more events than
    that, so it continues-as-new only after a turn in the run, never while idle."""
    model = script({"content": "one"}, {"content": "two"})
    async with parley_worker(registry(), model, continue_as_new_after_events=1) as conv:
        sid = new_session()
        assert (await conv.send(sid, "erin", "hi")).reply == "one"
        await asyncio.sleep(3)  # idle: a loop would continue-as-new about once a second
        client = conv.handle(sid)._client
        runs = [r async for r in client.list_workflows(f"WorkflowId = 'conversation-{sid}'")]
        assert len(runs) == 2  # the first run, continued once after its turn
        assert (await conv.send(sid, "erin", "again")).reply == "two"
        state = await conv.state(sid, "erin")
        assert state.counters.continued_as_new <= 2 and state.status == "idle"
