"""The error table of design.md, row by row, before and after a decision."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType

from parley.contracts import PARLEY_STATUS, RUN_TOOL, Decision
from parley.contracts.errors import ErrorType
from parley.tools import ToolRegistry, auto, confirm
from tests.support import RUNS, call, registry, script, strict_write, write_record
from tests.support.transcripts import (
    ai_messages,
    envelope_status,
    new_session,
    runs_in,
    tool_messages,
)

FIX = "\n Please fix your mistakes."
DONE = {"content": "Done."}


async def test_422_after_a_decision_reaches_the_model_which_corrects_it(parley_worker) -> None:
    model = script(
        {"content": "Writing 20.", "tool_calls": [call("strict_write", "c1", count=20)]},
        {"content": "At most 10; trying 5.", "tool_calls": [call("strict_write", "c2", count=5)]},
        {"content": "Wrote 5."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "write 20 items")
        assert [p.tool_call_id for p in turn.pending] == ["c1"]

        turn = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="c1", action="approve")]
        )
        assert turn.status == "awaiting_approval"  # the corrected call needs its own approval
        assert [(p.tool_call_id, p.args) for p in turn.pending] == [("c2", {"count": 5})]
        state = await conversations.state(sid, "alice")
        first = tool_messages(state.transcript, pending=("c2",))["c1"]
        assert first.content == "Error: count must be at most 10" + FIX
        assert first.status == "error"
        assert first.artifact["error"] == {
            "type": ErrorType.TOOL_INPUT,
            "message": "count must be at most 10",
            "http_status": 422,
            "body": {"message": "count must be at most 10"},
        }
        # the model read the error: it comes before the model's correction
        assert state.transcript.index(first) < state.transcript.index(
            ai_messages(state.transcript)[1]
        )

        turn = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="c2", action="approve")]
        )
        assert (turn.status, turn.reply) == ("completed", "Wrote 5.")
        assert [r["count"] for r in runs_in(sid, "strict_write")] == [20, 5]
        answers = tool_messages((await conversations.state(sid, "alice")).transcript)
        assert envelope_status(answers["c2"]) == "success"
        assert answers["c2"].artifact["payload"] == {"wrote": 5}


async def test_422_before_a_decision_goes_back_to_the_model_without_approval(
    parley_worker,
) -> None:
    tools = ToolRegistry([auto(strict_write), confirm(write_record)])
    model = script(
        {
            "content": "Three tries.",
            "tool_calls": [
                call("strict_write", "c1", count=20),  # auto, raises ToolInputError
                call("write_record", "c2", title=123),  # confirm, args against the schema
                call("no_such_tool", "c3", x=1),  # not a tool at all
            ],
        },
        {"content": "I got those wrong."},
    )
    async with parley_worker(tools, model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "go")

        assert (turn.status, turn.pending) == ("completed", [])
        assert turn.reply == "I got those wrong."
        answers = tool_messages((await conversations.state(sid, "alice")).transcript)
        assert answers["c1"].content == "Error: count must be at most 10" + FIX
        assert answers["c1"].artifact["error"]["http_status"] == 422
        assert answers["c2"].content.startswith("Error: invalid arguments for write_record")
        assert "title" in answers["c2"].content
        assert answers["c3"].content.startswith("Error: unknown tool 'no_such_tool'")
        assert "write_record" in answers["c3"].content  # it learns what exists
        for answer in answers.values():
            assert answer.content.endswith(FIX)
            assert (answer.status, envelope_status(answer)) == ("error", "error")
            assert answer.artifact["error"]["type"] == ErrorType.TOOL_INPUT
        assert [r["count"] for r in runs_in(sid, "strict_write")] == [20]
        assert runs_in(sid, "write_record") == []


async def test_permission_error_reaches_the_model_neutrally(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("guarded_write", "c1", target="prod")]},
        {"content": "prod is read-only for you."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "write prod")

        assert (turn.status, turn.reply) == ("completed", "prod is read-only for you.")
        answer = tool_messages((await conversations.state(sid, "alice")).transcript)["c1"]
        assert answer.content == "Error: prod is read-only for this user"
        assert "Please fix" not in answer.content
        assert answer.artifact["error"]["type"] == ErrorType.TOOL_PERMISSION
        assert answer.artifact["error"]["http_status"] is None
        assert len(runs_in(sid, "guarded_write")) == 1  # not retried


async def test_programming_error_fails_the_turn_closed(parley_worker) -> None:
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("buggy_tool", "c1"),
                call("read_records", "c2"),
                call("write_record", "c3", title="x"),
            ],
        },
        {"content": "never said after the failure; said to the next message"},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "go")

        assert turn.status == "failed"
        assert "ValueError: unexpected None in config" in (turn.error or "")
        assert turn.pending == []
        state = await conversations.state(sid, "alice")
        assert state.status == "failed"
        described = await conversations.handle(sid).describe()  # never left "running"
        assert described.typed_search_attributes.get(PARLEY_STATUS) == "failed"
        assert state.counters.model_calls == 1
        assert len(ai_messages(state.transcript)) == 1
        answers = tool_messages(state.transcript)  # all three answered, none pending
        assert {i: envelope_status(m) for i, m in answers.items()} == {
            "c1": "error",
            "c2": "error",
            "c3": "error",
        }
        assert answers["c1"].artifact["error"]["type"] == ErrorType.TOOL_FAILED
        assert len(runs_in(sid, "buggy_tool")) == 1  # not retried
        assert runs_in(sid, "read_records") == [] and runs_in(sid, "write_record") == []
        events = [e.event for e in (await conversations.events(sid, "alice")).events]
        errors = [e for e in events if e["type"] == "RUN_ERROR"]
        assert len(errors) == 1
        assert errors[0]["code"] == ErrorType.TOOL_FAILED
        assert "unexpected None" in errors[0]["message"]

        turn = await conversations.send(sid, "alice", "and now?")
        assert (turn.status, turn.reply) == (
            "completed",
            "never said after the failure; said to the next message",
        )
        assert (await conversations.state(sid, "alice")).status == "idle"


async def test_transient_error_is_retried_by_temporal(parley_worker, client) -> None:
    model = script({"content": "", "tool_calls": [call("flaky_read", "c1")]}, DONE)
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "read")

        assert turn.status == "completed"
        assert [(r.tool_call_id, r.status, r.content) for r in turn.results] == [
            ("c1", "success", "fresh data")
        ]
        assert len(runs_in(sid, "flaky_read")) == 3  # failed twice, then answered
        history = await conversations.handle(sid).fetch_history()
        scheduled = {
            e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        }
        attempts = [
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and scheduled[e.activity_task_started_event_attributes.scheduled_event_id] == RUN_TOOL
        ]
        assert attempts == [3]


async def test_auto_and_confirm_calls_in_one_message_are_each_answered_once(
    parley_worker,
) -> None:
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("read_records", "c1"),
                call("write_record", "c2", title="a"),
                call("read_records", "c3"),
                call("strict_write", "c4", count=1),
            ],
        },
        DONE,
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "go")

        assert turn.status == "awaiting_approval"
        assert [p.tool_call_id for p in turn.pending] == ["c2", "c4"]
        assert [(r.tool_call_id, r.status) for r in turn.results] == [
            ("c1", "success"),
            ("c3", "success"),
        ]
        assert len(runs_in(sid, "read_records")) == 2
        assert runs_in(sid, "write_record") == [] and runs_in(sid, "strict_write") == []
        state = await conversations.state(sid, "alice")
        assert set(tool_messages(state.transcript, pending=("c2", "c4"))) == {"c1", "c3"}

        turn = await conversations.decide(
            sid,
            "alice",
            [
                Decision(tool_call_id="c2", action="approve"),
                Decision(tool_call_id="c4", action="approve"),
            ],
        )

        assert (turn.status, turn.reply) == ("completed", "Done.")
        answers = tool_messages((await conversations.state(sid, "alice")).transcript)
        assert {i: envelope_status(m) for i, m in answers.items()} == dict.fromkeys(
            ["c1", "c2", "c3", "c4"], "success"
        )
        assert len(runs_in(sid, "read_records")) == 2  # the auto calls did not run again
        assert len(runs_in(sid, "write_record")) == len(runs_in(sid, "strict_write")) == 1


async def test_deny_policy_tool_never_runs(parley_worker) -> None:
    model = script({"content": "", "tool_calls": [call("drop_tables", "c1")]}, DONE)
    runs_before = [r for r in RUNS if r["tool"] == "drop_tables"]
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "drop everything")

        assert (turn.status, turn.pending) == ("completed", [])
        answer = tool_messages((await conversations.state(sid, "alice")).transcript)["c1"]
        assert answer.content == "Error: drop_tables is not allowed in this conversation"
        assert "Please fix" not in answer.content
        assert answer.artifact["error"]["type"] == ErrorType.TOOL_PERMISSION
        assert [r for r in RUNS if r["tool"] == "drop_tables"] == runs_before
        assert (await conversations.state(sid, "alice")).counters.tool_runs == 0


async def test_model_call_bound_fails_the_turn_and_the_next_message_works(
    parley_worker,
) -> None:
    looping = [{"content": "", "tool_calls": [call("read_records", f"c{i}")]} for i in range(3)]
    model = script(*looping, {"content": "Back to you."})
    async with parley_worker(registry(), model, max_model_calls_per_turn=3) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "read forever")

        assert turn.status == "failed"
        assert "3 times" in (turn.error or "")
        state = await conversations.state(sid, "alice")
        assert state.counters.model_calls == 3
        assert set(tool_messages(state.transcript)) == {"c0", "c1", "c2"}
        events = [e.event for e in (await conversations.events(sid, "alice")).events]
        assert [e["code"] for e in events if e["type"] == "RUN_ERROR"] == [
            ErrorType.MODEL_CALL_LIMIT
        ]

        turn = await conversations.send(sid, "alice", "stop")
        assert (turn.status, turn.reply) == ("completed", "Back to you.")
