"""Determinism: ConversationWorkflow replays a recorded history, live and from a fixture.

The fixture ``tests/histories/conversation.json`` holds a whole conversation (decisions,
a 422 the model corrects, a permission error, a rejection, a failed turn, the end), so a
change that breaks replay fails CI instead of stranding running conversations. When a
change to the workflow is meant to alter its commands, record the fixture again with
``PARLEY_RECORD_HISTORY=1 .venv/bin/pytest tests/test_replay.py`` and say why in the
commit.

A second fixture, ``tests/histories/signals_expiry_continue_as_new.json``, holds every
run of a conversation that takes decisions by signal (one applied, one refused), a
blocking event read, the ``upgrade`` wake-up, an expiry and continue-as-new.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from parley.client import Conversations
from parley.contracts import ConversationSnapshot, Decision
from parley.storage import LocalFileStorageDriver, data_converter
from parley.workflows.conversation import ConversationWorkflow
from tests.support import call, registry, script
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually

FIXTURE = Path(__file__).parent / "histories" / "conversation.json"
FIXTURE_WORKFLOW_ID = "conversation-replay-fixture"

SCRIPT = [
    {"content": "Writing 20.", "tool_calls": [call("strict_write", "c1", count=20)]},
    {"content": "Trying 5.", "tool_calls": [call("strict_write", "c2", count=5)]},
    {
        "content": "",
        "tool_calls": [call("read_records", "c3"), call("guarded_write", "c4", target="prod")],
    },
    {"content": "Wrote 4; prod is read-only."},
    {"content": "", "tool_calls": [call("write_record", "c5", title="Q3")]},
    {"content": "Not written."},
    {"content": "", "tool_calls": [call("buggy_tool", "c6")]},
]


async def hold_a_conversation(conversations: Conversations, sid: str) -> ConversationSnapshot:
    """Every kind of step a conversation takes, once; returns its final snapshot."""
    await conversations.send(sid, "alice", "write 20 items")
    await conversations.decide(sid, "alice", [Decision(tool_call_id="c1", action="approve")])
    done = await conversations.decide(
        sid, "alice", [Decision(tool_call_id="c2", action="edit", args={"count": 4})]
    )
    assert done.status == "completed"
    await conversations.send(sid, "alice", "write Q3")
    await conversations.decide(
        sid, "alice", [Decision(tool_call_id="c5", action="reject", message="not now")]
    )
    failed = await conversations.send(sid, "alice", "use the buggy tool")
    assert failed.status == "failed"
    await conversations.end(sid, "alice")
    return await conversations.handle(sid).result()


def replayer() -> Replayer:
    return Replayer(
        workflows=[ConversationWorkflow],
        data_converter=data_converter(driver=LocalFileStorageDriver(FIXTURE.parent / "payloads")),
    )


async def test_a_recorded_conversation_replays(parley_worker) -> None:
    recording = bool(os.environ.get("PARLEY_RECORD_HISTORY"))
    async with parley_worker(registry(), script(*SCRIPT)) as conversations:
        sid = FIXTURE_WORKFLOW_ID.removeprefix("conversation-") if recording else new_session()
        final = await hold_a_conversation(conversations, sid)
        history = await conversations.handle(sid).fetch_history()

    assert final.status == "ended"
    assert {i: m.artifact["status"] for i, m in tool_messages(final.transcript).items()} == {
        "c1": "error",
        "c2": "success",
        "c3": "success",
        "c4": "error",
        "c5": "rejected",
        "c6": "error",
    }
    result = await replayer().replay_workflow(history)
    assert result.replay_failure is None

    if recording:
        FIXTURE.parent.mkdir(exist_ok=True)
        recorded = json.loads(history.to_json())
        FIXTURE.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")


async def test_the_committed_history_replays() -> None:
    history = WorkflowHistory.from_json(FIXTURE_WORKFLOW_ID, FIXTURE.read_text(encoding="utf-8"))
    assert len(history.events) > 50  # the whole conversation, not a stub

    result = await replayer().replay_workflow(history)

    assert result.replay_failure is None


async def test_a_changed_workflow_fails_replay_of_the_committed_history() -> None:
    """The fixture test has teeth: a workflow that orders its commands differently fails."""
    history = WorkflowHistory.from_json(FIXTURE_WORKFLOW_ID, FIXTURE.read_text(encoding="utf-8"))
    body = json.loads(FIXTURE.read_text(encoding="utf-8"))
    activity_types = {
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in body["events"]
        if "activityTaskScheduledEventAttributes" in e
    }
    assert activity_types == {"parley.call_model", "parley.run_tool"}
    tampered = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for event in tampered["events"]:
        attributes = event.get("activityTaskScheduledEventAttributes")
        if attributes and attributes["activityType"]["name"] == "parley.run_tool":
            attributes["activityType"]["name"] = "parley.some_other_tool_runner"
            break
    tampered_history = WorkflowHistory.from_json(FIXTURE_WORKFLOW_ID, json.dumps(tampered))
    assert tampered_history.events != history.events

    result = await replayer().replay_workflow(tampered_history, raise_on_replay_failure=False)

    assert result.replay_failure is not None


# --- a second golden history: the channels and the clock ---------------------------

CHANNELS_FIXTURE = FIXTURE.parent / "signals_expiry_continue_as_new.json"
CHANNELS_WORKFLOW_ID = "conversation-replay-channels"
CHANNELS_SCRIPT = [
    {"content": "", "tool_calls": [call("write_record", "c1", title="Q1")]},
    {"content": "Written."},
    {"content": "", "tool_calls": [call("write_record", "c2", title="Q2")]},
    {"content": "Not written: nobody decided."},
    {"content": "Hello again."},
    {"content": "Still here."},
]


async def hold_channels(conversations: Conversations, sid: str) -> None:
    """A decision by signal, a refused signal, a blocking event read, the ``upgrade``
    wake-up, an expiry and continue-as-new (a low threshold)."""
    handle = conversations.handle(sid)
    await conversations.send(sid, "alice", "write Q1")
    assert await conversations.wait_for_events(sid, "alice", after=0) > 0
    approve = {"decisions": [{"tool_call_id": "c1", "action": "approve"}], "decided_by": "alice"}
    await handle.signal("decide_signal", approve)
    await handle.signal("decide_signal", approve)  # stale now: recorded as refused
    await handle.signal("upgrade")

    async def refused_and_at_rest() -> bool:
        state = await conversations.state(sid, "alice")
        refused = [e.event for e in state.audit].count("decision_refused") == 1
        return refused and state.status == "idle"  # the approved call's turn is over

    await eventually(refused_and_at_rest, 60, "the stale signal refused, the turn over")
    await conversations.send(sid, "alice", "write Q2")

    async def expired_and_at_rest() -> bool:  # a 2 s deadline, then the turn that says so
        state = await conversations.state(sid, "alice")
        return not state.pending and state.status == "idle"

    await eventually(expired_and_at_rest, 60, "the pending call expired, the turn over")
    await conversations.send(sid, "alice", "hello")
    await conversations.send(sid, "alice", "are you there")
    await conversations.end(sid, "alice")


async def runs_of(conversations: Conversations, workflow_id: str) -> list[WorkflowHistory]:
    client = conversations.handle("x")._client  # the conversations' own client
    found = [
        (execution.start_time, execution.run_id)
        async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'")
    ]
    return [
        await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        for _, run_id in sorted(found)
    ]


async def test_a_recorded_conversation_with_signals_expiry_and_continue_as_new_replays(
    parley_worker,
) -> None:
    recording = bool(os.environ.get("PARLEY_RECORD_HISTORY"))
    async with parley_worker(
        registry(),
        script(*CHANNELS_SCRIPT),
        pending_expiry_seconds=2,
        continue_as_new_after_events=30,
    ) as conversations:
        sid = CHANNELS_WORKFLOW_ID.removeprefix("conversation-") if recording else new_session()
        await hold_channels(conversations, sid)
        await conversations.handle(sid).result()
        histories = await runs_of(conversations, f"conversation-{sid}")

    assert len(histories) >= 2, "the conversation never continued as new"
    for history in histories:
        result = await replayer().replay_workflow(history)
        assert result.replay_failure is None
    if recording:
        runs = [json.loads(history.to_json()) for history in histories]
        CHANNELS_FIXTURE.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")


async def test_the_committed_channels_history_replays_run_by_run() -> None:
    runs = json.loads(CHANNELS_FIXTURE.read_text(encoding="utf-8"))
    assert len(runs) >= 2
    kinds = {
        key
        for run in runs
        for event in run["events"]
        for key in event
        if key.endswith("EventAttributes")
    }
    # What this fixture is for: each of these is in it.
    assert {
        "workflowExecutionSignaledEventAttributes",
        "workflowExecutionContinuedAsNewEventAttributes",
        "timerFiredEventAttributes",
        "workflowExecutionUpdateCompletedEventAttributes",
    } <= kinds
    for run in runs:
        history = WorkflowHistory.from_json(CHANNELS_WORKFLOW_ID, json.dumps(run))
        result = await replayer().replay_workflow(history)
        assert result.replay_failure is None
