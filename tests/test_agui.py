"""AG-UI decisions are never silently lost or altered, through the real gateway (uvicorn
on 127.0.0.1) in front of a real worker and dev server.

- A retried ``/agui`` request (the same message id, the same resume, or a retry that
  arrives while the first is still running) gets a whole, valid event sequence: the
  run that answered it, replayed from the event log. (Before: 200 and no event.)
- A resume or a REST decision with a key it does not define, or that the workflow
  finds invalid, is refused one way: 422 ``InvalidDecision`` in the error shape,
  before any stream starts, in one line with no pydantic links; nothing runs and the
  call still waits. (Before, ``{"action": "approve", "args": {...}}`` ran the original args and
  ``{"action": "reject", "mesage": ...}`` lost the reason.)
- The interrupt's ``responseSchema`` offers ``remember``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.support import GATE, SLOW_STARTED, call, registry, runs_of, script
from tests.support.gateway import ALICE_TOKEN, SseEvent, auth, serve_gateway, sse_events
from tests.support.transcripts import new_session

AG_UI_EVENT = TypeAdapter(Event)
ALICE = auth(ALICE_TOKEN)


async def agui(http: httpx.AsyncClient, run: dict[str, Any]) -> list[SseEvent]:
    async with http.stream("POST", "/agui", json=run, headers=ALICE) as stream:
        assert stream.status_code == 200, await stream.aread()
        return [event async for event in sse_events(stream)]


def check_complete_run(events: list[SseEvent], run_id: str) -> None:
    """One whole AG-UI run: every event valid for ag-ui-protocol's models; it starts
    with RUN_STARTED and ends with RUN_FINISHED, both with the caller's run id; every
    message and tool call that starts also ends, in order."""
    assert events, "no events at all"
    for event in events:
        AG_UI_EVENT.validate_python(event.data)
    kinds = [e.type for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    assert kinds.count("RUN_STARTED") == 1 and kinds.count("RUN_FINISHED") == 1, kinds
    assert events[0].data["runId"] == run_id and events[-1].data["runId"] == run_id
    open_messages: set[str] = set()
    open_calls: set[str] = set()
    for event in events[1:-1]:
        data = event.data
        if event.type == "TEXT_MESSAGE_START":
            open_messages.add(data["messageId"])
        elif event.type == "TEXT_MESSAGE_CONTENT":
            assert data["messageId"] in open_messages
        elif event.type == "TEXT_MESSAGE_END":
            open_messages.remove(data["messageId"])
        elif event.type == "TOOL_CALL_START":
            open_calls.add(data["toolCallId"])
        elif event.type == "TOOL_CALL_ARGS":
            assert data["toolCallId"] in open_calls
        elif event.type == "TOOL_CALL_END":
            open_calls.remove(data["toolCallId"])
    assert not open_messages and not open_calls


def without_run_id(events: list[SseEvent]) -> list[tuple[str | None, dict]]:
    return [(e.id, {k: v for k, v in e.data.items() if k != "runId"}) for e in events]


async def test_a_retried_agui_request_replays_its_run(parley_worker) -> None:
    GATE.clear()
    SLOW_STARTED.clear()
    propose = {
        "content": "I will write it.",
        "tool_calls": [call("write_record", "c1", title="Q3")],
    }
    read_slowly = {"content": "", "tool_calls": [call("slow_read", "r1")]}
    async with (
        parley_worker(
            registry(), script(propose, {"content": "Written."}, read_slowly, {"content": "Read."})
        ) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        user = {"id": "m1", "role": "user", "content": "write Q3"}
        first = await agui(http, {"threadId": sid, "runId": "run-1", "messages": [user]})
        check_complete_run(first, "run-1")
        assert first[-1].data["outcome"]["type"] == "interrupt"

        # The same message id again (a client retrying): the same run, replayed.
        retried = await agui(http, {"threadId": sid, "runId": "run-1b", "messages": [user]})
        check_complete_run(retried, "run-1b")
        assert without_run_id(retried) == without_run_id(first)

        resume = {
            "threadId": sid,
            "runId": "run-2",
            "messages": [user],
            "resume": [
                {"interruptId": "c1", "status": "resolved", "payload": {"action": "approve"}}
            ],
        }
        decided = await agui(http, resume)
        check_complete_run(decided, "run-2")
        # The same resume again: the same run, and the tool ran once.
        again = await agui(http, {**resume, "runId": "run-2b"})
        check_complete_run(again, "run-2b")
        assert without_run_id(again) == without_run_id(decided)
        assert any(e.type == "TOOL_CALL_RESULT" for e in again)
        assert [r["key"] for r in runs_of("write_record")].count(f"conversation-{sid}:c1") == 1

        # A retry that arrives while the first request's run is still going: it waits
        # for that run, then gets all of it (not the half it joined).
        read = {"threadId": sid, "messages": [{"id": "m2", "role": "user", "content": "read"}]}
        original = asyncio.create_task(agui(http, {**read, "runId": "run-3"}))
        await asyncio.wait_for(SLOW_STARTED.wait(), timeout=30)
        joined = asyncio.create_task(agui(http, {**read, "runId": "run-3b"}))
        await asyncio.sleep(1)  # the retry is attached to the running update
        assert not joined.done()
        GATE.set()
        first_read, joined_read = await asyncio.gather(original, joined)
        check_complete_run(first_read, "run-3")
        check_complete_run(joined_read, "run-3b")
        assert without_run_id(joined_read) == without_run_id(first_read)
        assert [
            r["tool"] for r in runs_of("slow_read") if r["key"].startswith(f"conversation-{sid}:")
        ] == ["slow_read"]


async def test_a_resume_or_decision_with_an_unknown_key_is_refused_and_nothing_runs(
    parley_worker,
) -> None:
    propose = {
        "content": "I will write it.",
        "tool_calls": [call("write_record", "c1", title="Q3")],
    }
    async with (
        parley_worker(registry(), script(propose, {"content": "Not written."})) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        user = {"id": "m1", "role": "user", "content": "write Q3"}
        first = await agui(http, {"threadId": sid, "runId": "run-1", "messages": [user]})
        (interrupt,) = first[-1].data["outcome"]["interrupts"]
        schema = interrupt["responseSchema"]
        assert schema["properties"]["remember"]["type"] == "boolean"
        assert schema["additionalProperties"] is False

        def resume(entry: dict[str, Any]) -> dict[str, Any]:
            return {"threadId": sid, "runId": "run-x", "messages": [user], "resume": [entry]}

        refused_resumes = {
            "approve with args (ran the original args)": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": {"action": "approve", "args": {"title": "Q4"}},
            },
            "a misspelt reason (was lost)": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": {"action": "reject", "mesage": "wrong quarter"},
            },
            "an unknown key on the entry": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": True,
                "reason": "fine",
            },
            "a call id in the payload": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": {"action": "approve", "tool_call_id": "c9"},
            },
            "an edit without args": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": {"action": "edit"},
            },
            "an edit with an argument the tool does not take": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": {"action": "edit", "args": {"title": "Q4", "force": True}},
            },
            "a payload that is no decision": {
                "interruptId": "c1",
                "status": "resolved",
                "payload": 7,
            },
        }
        for what, entry in refused_resumes.items():
            answer = await http.post("/agui", json=resume(entry), headers=ALICE)
            assert answer.status_code == 422, (what, answer.text)
            assert answer.headers["content-type"] == "application/json"
            error = answer.json()["error"]
            assert error["type"] == "InvalidDecision", (what, error)
            message = error["message"]
            assert "pydantic" not in message and "\n" not in message, (what, message)
            print(f"agui: {what}: {message}")

        # The same through REST.
        decisions = f"/v1/conversations/{sid}/decisions"
        for decision in (
            {"tool_call_id": "c1", "action": "reject", "mesage": "wrong quarter"},
            {"tool_call_id": "c1", "action": "approve", "args": {"title": "Q4"}},
        ):
            answer = await http.post(decisions, json={"decisions": [decision]}, headers=ALICE)
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["type"] == "InvalidDecision"
            assert error["message"].startswith("decisions.0"), error
            assert "pydantic" not in error["message"] and "Value error" not in error["message"]

        # A body that is no RunAgentInput: one line too.
        answer = await http.post("/agui", json={"threadId": 5, "messages": "x"}, headers=ALICE)
        assert answer.status_code == 422
        assert "pydantic" not in answer.json()["error"]["message"]

        # Nothing ran, nothing was decided: the call still waits, and a valid reject
        # (with its reason) goes through.
        state = (await http.get(f"/v1/conversations/{sid}", headers=ALICE)).json()
        assert [c["tool_call_id"] for c in state["pending"]] == ["c1"]
        assert not [e for e in state["audit"] if e["event"] == "decided"]
        assert all(r["key"] != f"conversation-{sid}:c1" for r in runs_of("write_record"))
        rejected = await agui(
            http,
            resume(
                {
                    "interruptId": "c1",
                    "status": "resolved",
                    "payload": {"action": "reject", "message": "wrong quarter"},
                }
            ),
        )
        result = next(e for e in rejected if e.type == "TOOL_CALL_RESULT")
        envelope = json.loads(result.data["content"])
        assert envelope["status"] == "rejected"
        assert "wrong quarter" in json.dumps(envelope)


async def test_a_resume_answers_every_open_interrupt(parley_worker) -> None:
    """AG-UI's rule holds though a REST decision may name one call of several: a resume
    that leaves an open interrupt unanswered is refused (422), and nothing runs."""
    propose = {
        "content": "",
        "tool_calls": [
            call("write_record", "c1", title="a"),
            call("write_record", "c2", title="b"),
        ],
    }
    async with (
        parley_worker(registry(), script(propose, {"content": "Both."})) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        user = {"id": "m1", "role": "user", "content": "write a and b"}
        first = await agui(http, {"threadId": sid, "runId": "run-1", "messages": [user]})
        assert len(first[-1].data["outcome"]["interrupts"]) == 2
        approve = {"status": "resolved", "payload": {"action": "approve"}}
        one = {"threadId": sid, "runId": "run-2", "messages": [user]}
        answer = await http.post(
            "/agui", json={**one, "resume": [{"interruptId": "c1", **approve}]}, headers=ALICE
        )
        assert answer.status_code == 422, answer.text
        assert "none of its entries answers c2" in answer.json()["error"]["message"]
        assert [r for r in runs_of("write_record") if sid in r["key"]] == []

        both = [{"interruptId": "c1", **approve}, {"interruptId": "c2", **approve}]
        decided = await agui(http, {**one, "resume": both})
        check_complete_run(decided, "run-2")
        assert len([r for r in runs_of("write_record") if sid in r["key"]]) == 2
