"""The AG-UI event log: protocol-valid events, offset-addressed, resumable, with one
interrupt per pending call and one JSON envelope per tool result."""

from __future__ import annotations

import json

from ag_ui.core import Event
from pydantic import TypeAdapter

from parley.contracts import Decision, ToolResult
from tests.support import call, registry, script
from tests.support.transcripts import new_session

AG_UI_EVENT = TypeAdapter(Event)


async def test_events_follow_ag_ui_and_resume_from_an_offset(parley_worker) -> None:
    model = script(
        {
            "content": "Two writes.",
            "tool_calls": [
                call("write_record", "c1", title="a"),
                call("write_record", "c2", title="b"),
            ],
        },
        {"content": "Both done."},
    )
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        await conv.send(sid, "jo", "write a and b")
        page = await conv.events(sid, "jo")
        first = [e.event for e in page.events]
        for event in first:
            AG_UI_EVENT.validate_python(event)  # each one is a valid AG-UI event
        assert [e["type"] for e in first] == [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "CUSTOM",  # parley.usage, before the run's end
            "RUN_FINISHED",
        ]
        assert json.loads(first[5]["delta"]) == {"title": "a"}
        outcome = first[-1]["outcome"]
        assert outcome["type"] == "interrupt"
        assert [(i["id"], i["toolCallId"]) for i in outcome["interrupts"]] == [
            ("c1", "c1"),
            ("c2", "c2"),
        ]

        await conv.decide(
            sid,
            "jo",
            [
                Decision(tool_call_id="c1", action="approve"),
                Decision(tool_call_id="c2", action="reject"),
            ],
        )
        rest = await conv.events(sid, "jo", after=page.next_after)
        assert rest.events[0].offset == page.next_after + 1
        types = [e.event["type"] for e in rest.events]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
        assert rest.events[-1].event["outcome"]["type"] == "success"
        results = [e.event for e in rest.events if e.event["type"] == "TOOL_CALL_RESULT"]
        envelopes = {r["toolCallId"]: ToolResult.model_validate_json(r["content"]) for r in results}
        assert envelopes["c1"].status == "success"
        assert envelopes["c1"].payload == {"written": "a", "by": "jo"}
        assert envelopes["c2"].status == "rejected"
        for item in rest.events:
            AG_UI_EVENT.validate_python(item.event)

        nothing_new = await conv.events(sid, "jo", after=rest.next_after)
        assert nothing_new.events == [] and nothing_new.next_after == rest.next_after


async def test_a_failed_turn_ends_with_run_error(parley_worker) -> None:
    model = script({"content": "", "tool_calls": [call("buggy_tool", "c1")]})
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        turn = await conv.send(sid, "kim", "go")
        assert turn.status == "failed"
        last = (await conv.events(sid, "kim")).events[-1].event
        AG_UI_EVENT.validate_python(last)
        assert last["type"] == "RUN_ERROR" and last["code"] == "ToolFailed"
        assert "unexpected None in config" in last["message"]
