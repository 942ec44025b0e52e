"""The conversation's records, each the one writer of its part of the state: the
transcript, the ledger, the tally of counters, deduplication (and the parking of updates
that a later turn answers), the pending calls and the event log. Each runs here on its
own, over a plain ``ConversationState``, with a stand-in for the workflow API: no server.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from parley.contracts import (
    KEPT_EVENTS,
    AuditArchiveRef,
    ContextRef,
    PendingCall,
    ToolCall,
    ToolResult,
    TurnResult,
)
from parley.contracts.conversation import DecideInput, TranscriptCut
from parley.contracts.errors import ConversationEnded
from parley.workflows.record.dedup import RECENT_RESULTS_KEPT
from tests.support.fake_workflow import NOW, FakeWorkflow, context, install


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeWorkflow:
    return install(monkeypatch)


def ref(length: int) -> ContextRef:
    return ContextRef(claim={"segment": str(length)}, length=length)


def test_the_transcript_takes_each_kind_of_message_and_knows_what_is_unsent() -> None:
    view, records = context()
    transcript, window = records.transcript, view.state.transcript
    transcript.add_system("be brief", "instructions")
    transcript.add_human("hello", "m1")
    ai = AIMessage(content="", tool_calls=[{"name": "t", "args": {}, "id": "c1"}], id="a1")
    transcript.add_reply(ai, ref(2))
    transcript.add_result(ToolMessage(content="ok", tool_call_id="c1"))

    assert [type(m) for m in window.messages] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
    ]
    assert window.model_context == ref(2)
    assert [m.id for m in transcript.unsent()] == ["a1", None]  # the chain holds two
    assert transcript.answered() == {"c1"}


def test_a_cut_keeps_the_first_messages_inside_the_window_or_brings_older_ones() -> None:
    view, records = context()
    for i in range(4):
        records.transcript.add_human(f"m{i}", f"m{i}")
    before = records.transcript.cut(TranscriptCut(at=2, context=ref(2)))
    window = view.state.transcript
    assert before == 4 and [m.id for m in window.messages] == ["m0", "m1"]
    assert window.model_context == ref(2)

    window.offset = 10  # the run keeps messages 10 and 11 only: a cut at 3 brings its tail
    tail = [HumanMessage(content="two", id="t2")]
    assert records.transcript.cut(TranscriptCut(at=3, context=ref(3), tail=tail)) == 12
    assert (window.offset, [m.id for m in window.messages]) == (2, ["t2"])


def test_trimming_drops_only_stored_messages_before_the_latest_reply(fake: FakeWorkflow) -> None:
    view, records = context()
    for i in range(250):
        records.transcript.add_human("x", f"m{i}")
    records.transcript.add_reply(AIMessage(content="r", id="ai"), ref(30))
    records.ledger.trim()
    window = view.state.transcript
    assert window.offset == 30  # only what the chain stores, though 200 are kept at most
    records.transcript.add_reply(AIMessage(content="r", id="ai2"), ref(252))
    records.ledger.trim()
    assert window.offset == 52 and len(window.messages) == 200
    assert window.length == 252 and window.messages[-1].id == "ai2"


def test_a_message_enters_once_in_the_transcript_and_the_audit_log(fake: FakeWorkflow) -> None:
    view, records = context()
    records.ledger.enter("hi", "m1", "alice", {"message_id": "m1"})
    state = view.state
    assert [(m.content, m.id) for m in state.transcript.messages] == [("hi", "m1")]
    (entry,) = state.audit.entries
    assert (entry.event, entry.actor, entry.detail, entry.at) == (
        "message",
        "alice",
        {"message_id": "m1"},
        NOW,
    )
    assert entry.hash == entry.chained_hash(entry.prev_hash)


def test_an_answer_reaches_the_transcript_the_events_the_audit_and_the_turn(
    fake: FakeWorkflow,
) -> None:
    view, records = context()
    ledger, state = records.ledger, view.state
    ledger.begin_turn()
    ledger.answer(
        ToolCall(tool_call_id="c1", name="t"), ToolResult(status="success", content="ok"), "ran"
    )
    (message,) = state.transcript.messages
    assert isinstance(message, ToolMessage) and message.tool_call_id == "c1"
    assert [e["type"] for e in state.events.entries] == ["TOOL_CALL_RESULT"]
    assert [(e.event, e.actor) for e in state.audit.entries] == [("ran", "worker")]
    assert [r.tool_call_id for r in state.turn_results] == ["c1"]

    result = ledger.turn_result("completed", reply="done")
    ledger.rest(result)
    assert state.last_turn is result and [r.tool_call_id for r in result.results] == ["c1"]
    ledger.forget_turn()
    assert state.last_turn is None and state.turn_results == []


def test_the_ledger_records_an_archive_and_lets_the_archived_entries_go(
    fake: FakeWorkflow,
) -> None:
    view, records = context()
    for i in range(1_010):
        records.ledger.audit("message", "alice", detail={"i": i})
    records.ledger.archived(AuditArchiveRef(claim={"k": "v"}, first=0, length=10))
    audit = view.state.audit
    assert audit.archive is not None and (audit.offset, len(audit.entries)) == (10, 1_000)


def test_the_event_log_keeps_its_latest_events_under_their_offsets(fake: FakeWorkflow) -> None:
    view, records = context()
    for i in range(KEPT_EVENTS + 5):
        records.events.custom("parley.test", i)
    records.events.trim()
    assert view.state.events.offset == 5 and records.events.last_offset == KEPT_EVENTS + 4
    assert records.events.page(after=4, limit=1).events[0].event["value"] == 5


def test_the_tally_is_the_one_writer_of_the_counters(fake: FakeWorkflow) -> None:
    view, records = context()
    tally = records.tally
    tally.turn()
    tally.model_call()
    tally.tool_run()
    tally.decisions(2)
    tally.continued_as_new()
    tally.rewound()
    assert (tally.subagent(), tally.subagent()) == (1, 2)
    assert view.state.counters.model_dump() == {
        "turns": 1,
        "model_calls": 1,
        "tool_runs": 1,
        "decisions": 2,
        "continued_as_new": 1,
        "subagents": 2,
        "rewinds": 1,
    }
    assert fake.metrics["parley_turns"] == 1


def test_a_retried_update_gets_its_first_result_among_the_latest(fake: FakeWorkflow) -> None:
    view, records = context()
    dedup = records.dedup
    first = TurnResult(status="completed", reply="first")
    fake.update_id = "u0"
    assert dedup.earlier() is None
    dedup.remember(first)
    assert dedup.earlier() is first
    for i in range(1, RECENT_RESULTS_KEPT + 1):
        dedup.remember(TurnResult(status="completed"), request_id=f"u{i}")
    assert dedup.earlier() is None  # the oldest went
    assert len(view.state.dedup.recent_results) == RECENT_RESULTS_KEPT


def test_signalled_decisions_wait_in_order_and_stand_for_their_update(fake: FakeWorkflow) -> None:
    _, records = context()
    dedup = records.dedup
    dedup.queue(DecideInput(decisions=[], decided_by="alice", request_id="u1"))
    dedup.queue(DecideInput(decisions=[], decided_by="alice"))
    fake.update_id = "u1"
    assert dedup.signalled() and len(dedup.queued) == 2
    taken = dedup.take_next()
    assert taken.request_id == "u1" and not dedup.signalled()
    dedup.applying = "u1"
    assert dedup.signalled()


async def test_a_parked_update_returns_what_a_later_turn_answers(fake: FakeWorkflow) -> None:
    view, records = context()
    dedup = records.dedup
    waiting = asyncio.ensure_future(dedup.park("u1"))
    refused = asyncio.ensure_future(dedup.park("u2"))
    await asyncio.sleep(0)
    assert not waiting.done()
    result = TurnResult(status="completed", reply="answered")
    dedup.answer("u1", result)
    dedup.refuse("u2", ConversationEnded("ended first"))
    assert await waiting is result
    with pytest.raises(ConversationEnded):
        await refused
    assert view.state.dedup.recent_results == {"u1": result}
    dedup.answer("u3", result)  # nobody waits: kept for a retry, nothing held
    dedup.refuse("u4", ConversationEnded("x"))
    assert "u3" in view.state.dedup.recent_results and dedup._answers == {}


def test_an_escalated_call_waits_once_more_on_the_pending_list(fake: FakeWorkflow) -> None:
    view, records = context()
    call = PendingCall.model_validate(
        {
            "tool_call_id": "c1",
            "name": "t",
            "args": {},
            "args_hash": "h",
            "description": "d",
            "expires_at": NOW,
            "on_timeout": {"action": "escalate", "seconds": 60, "escalate_to": "bob"},
        }
    )
    records.pending.add(call)
    later = NOW.replace(hour=4)
    records.pending.escalate(call, later)
    (waiting,) = view.state.pending
    assert waiting.on_timeout is not None and waiting.on_timeout.escalated
    assert waiting.expires_at == later and records.pending.own() == [waiting]
