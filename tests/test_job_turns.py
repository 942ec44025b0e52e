"""Jobs around the turn, each on its own over a plain state with a stand-in for the
workflow API (no server): messages that come while a turn runs (``busy``: parked until
the turn that applies them rests, an interrupt cancels the model call), a subagent's
reports (``subagents``), a rewind's cut (``rewind``). Also: a conversation that starts a
subagent by the workflow's registered name replays the commands of one recorded when it
started it by a typed reference, and the reading of who writes the state has teeth.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from parley.contracts import (
    ContextRef,
    Delegation,
    SendMessageInput,
    SubagentReport,
    ToolCall,
    TurnResult,
)
from parley.contracts.conversation import RewindInput, TranscriptCut
from parley.contracts.errors import ConversationEnded
from parley.contracts.names import INTERRUPTED_EVENT
from parley.storage import data_converter
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.lifecycle.rewind import Rewinder
from parley.workflows.turn.busy import Busy
from parley.workflows.turn.front_end import FrontEnd
from parley.workflows.turn.streaming import ReplyStream
from parley.workflows.turn.subagents import Subagents
from tests.support.fake_workflow import FakeWorkflow, context, install
from tests.support.state_writers import writes_in

HISTORIES = Path(__file__).parent / "histories"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeWorkflow:
    return install(monkeypatch)


def busy_of(**state: Any) -> tuple[Any, Any, Busy]:
    view, records = context(**state)
    front = FrontEnd(view.state, records.ledger)
    return view, records, Busy(view, records, ReplyStream(records.events), front)


def message(text: str) -> SendMessageInput:
    return SendMessageInput(text=text, user_id="alice", message_id=f"m-{text}")


async def queued(fake: FakeWorkflow, text: str) -> tuple[Any, Busy, asyncio.Future[TurnResult]]:
    """A conversation whose turn runs, and the ``send_message`` update ``u1`` of a
    message that waits for a turn, parked."""
    view, _, busy = busy_of(turn_running=True)
    fake.update_id = "u1"
    waiting = asyncio.ensure_future(busy.wait_for_turn(message(text), "enqueue"))
    await asyncio.sleep(0)
    return view, busy, waiting


async def test_a_queued_message_waits_parked_until_the_turn_that_applies_it_rests(
    fake: FakeWorkflow,
) -> None:
    view, busy, waiting = await queued(fake, "also")
    state = view.state
    assert [q.update_id for q in state.queued_messages] == ["u1"] and not waiting.done()
    assert [e.event for e in state.audit.entries] == ["enqueued"]

    async def run_turn(**turn: Any) -> TurnResult:  # the engine: opening, then rest
        turn["opening"]()
        result = TurnResult(status="completed", reply="both")
        busy.answered(result)
        return result

    state.turn_running = False
    assert busy.next_ready()
    await busy.run_next(run_turn)
    assert (await waiting).reply == "both"
    assert [(m.content, m.id) for m in state.transcript.messages] == [("also", "m-also")]
    assert state.audit.entries[-1].detail == {"message_id": "m-also", "while_busy": "enqueue"}
    assert state.counters.turns == 1 and state.queued_messages == []
    assert state.dedup.recent_results["u1"].reply == "both"  # for a retry of u1


async def test_messages_still_queued_when_the_conversation_ends_are_refused(
    fake: FakeWorkflow,
) -> None:
    view, busy, waiting = await queued(fake, "late")
    busy.close()
    with pytest.raises(ConversationEnded, match="m-late"):
        await waiting
    assert view.state.queued_messages == [] and view.state.audit.entries[-1].event == "unqueued"


async def test_an_interrupting_message_cancels_the_model_call_and_joins_the_turn(
    fake: FakeWorkflow,
) -> None:
    view, _, busy = busy_of(turn_running=True)
    calls: list[list[str]] = []
    release = asyncio.Event()

    async def call_model(*, check_catalogue: bool) -> AIMessage:
        calls.append([str(m.content) for m in view.state.transcript.messages])
        if len(calls) == 1:
            await release.wait()  # the first call is slow: the interrupt comes first
        return AIMessage(content="answer", id="ai")

    fake.update_id = "u1"
    turn = asyncio.ensure_future(busy.call_model(call_model, check_catalogue=False))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(busy.wait_for_turn(message("stop"), "interrupt"))
    reply = await turn
    assert reply.content == "answer" and calls == [[], ["stop"]]
    assert [e.event for e in view.state.audit.entries] == ["enqueued", "interrupted", "message"]
    assert view.state.events.entries[-1]["name"] == INTERRUPTED_EVENT
    busy.answered(TurnResult(status="completed", reply="answer"))
    assert (await waiting).reply == "answer"


def test_a_report_is_kept_only_from_a_subagent_at_work(fake: FakeWorkflow) -> None:
    at_work = Delegation(name="planner", session_id="s/planner-1", tool_call_id="p1")
    view, records = context()
    view.state.delegations.active.append(at_work)
    subagents = Subagents(view, records)
    subagents.receive(SubagentReport(tool_call_id="p1", sequence=1))
    subagents.receive(SubagentReport(tool_call_id="gone", sequence=1))
    assert [r.tool_call_id for r in view.state.delegations.reports] == ["p1"]


def test_a_rewind_cuts_through_each_records_writer(fake: FakeWorkflow) -> None:
    view, records = context()
    for text in ("one", "two", "three"):
        records.transcript.add_human(text, text)
    front = FrontEnd(view.state, records.ledger)
    front.hold(ToolCall(tool_call_id="c9", name="client_tool"))
    records.ledger.begin_turn()
    records.ledger.rest(TurnResult(status="completed"))
    handover = type("Handover", (), {"rewound": False})()
    rewinder = Rewinder(view, records, front, handover)  # type: ignore[arg-type]
    cut = TranscriptCut(at=2, context=ContextRef(claim={"k": "v"}, length=2))
    rewinder.rewind(RewindInput(user_id="alice", cut=cut, seen_length=3))

    state = view.state
    assert [m.content for m in state.transcript.messages] == ["one", "two"]
    assert state.client_calls == [] and state.last_turn is None
    assert state.counters.rewinds == 1 and handover.rewound
    assert state.audit.entries[-1].detail == {"to": 2, "from_length": 3, "run_id": "run-a"}


@pytest.mark.parametrize(
    ("name", "workflow_id"),
    [
        ("subagent_parent", "conversation-s-688dd34531"),
        ("subagent_child", "conversation-s-688dd34531/planner-1"),
    ],
)
async def test_a_subagent_started_and_signalled_by_name_replays_its_recorded_commands(
    name: str, workflow_id: str
) -> None:
    """Recorded when the child was started (and signalled) by typed references to
    ``ConversationWorkflow``: its start, its decisions passed on and its reports."""
    text = (HISTORIES / f"{name}.json").read_text(encoding="utf-8")
    kinds = {key for event in json.loads(text)["events"] for key in event}
    assert "signalExternalWorkflowExecutionInitiatedEventAttributes" in kinds
    history = WorkflowHistory.from_json(workflow_id, text)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=data_converter())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


WRITES = """
class Job:
    def __init__(self, state: ConversationState, view: View, counters: Counters) -> None:
        self._state, self._view, self._window = state, view, state.transcript
        self._counters = counters

    def write(self) -> None:
        self._state.counters.turns += 1
        transcript = self._state.transcript
        del transcript.messages[:1]
        self._window.messages.append(HumanMessage(content="x"))
        self._state.pending = []
        self._state.dedup.recent_results["k"] = None
        self._view.state.queued_messages.clear()
        self._counters.turns = 0
        print(self._state.transcript.messages, self._view.state.pending)  # reads
"""


def test_the_reading_of_who_writes_the_state_sees_each_kind_of_write() -> None:
    assert [part for part, _ in writes_in(WRITES)] == [
        "counters",
        "transcript",
        "transcript",
        "pending",
        "dedup",
        "queued_messages",
        "counters",
    ]
    assert HumanMessage  # the snippet's names need not resolve: it is only read
