"""The HTTP gateway against a real dev server and worker: every endpoint, AG-UI event
streams (resumable from an offset), per-user access, clear 4xx answers, and decisions
that go through while many viewers follow the conversation."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.support import call, registry, runs_of, script
from tests.support.gateway import (
    ALICE_TOKEN,
    BOB_TOKEN,
    SseEvent,
    auth,
    collect_until,
    serve_gateway,
    sse_events,
)
from tests.support.transcripts import new_session

AG_UI_EVENT = TypeAdapter(Event)
ALICE = auth(ALICE_TOKEN)
BOB = auth(BOB_TOKEN)
SSE = {"Accept": "text/event-stream"}

PROPOSE_WRITE = {
    "content": "I will write it.",
    "tool_calls": [call("write_record", "c1", title="Q3")],
}
DONE = {"content": "Written."}


def finished_runs(events: list[SseEvent]) -> int:
    return sum(1 for e in events if e.type in ("RUN_FINISHED", "RUN_ERROR"))


def check_ag_ui(events: list[SseEvent]) -> None:
    """Every event parses with ag-ui-protocol's models; every result's content is one
    JSON document."""
    for event in events:
        AG_UI_EVENT.validate_python(event.data)
        if event.type == "TOOL_CALL_RESULT":
            envelope = json.loads(event.data["content"])
            assert set(envelope) >= {"status", "content", "payload", "error"}


async def test_every_endpoint_with_access_rules(parley_worker) -> None:
    async with (
        parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        sid = new_session()
        messages = f"/v1/conversations/{sid}/messages"

        # unauthenticated or unknown token: 401, in the one error shape
        answer = await http.post(messages, json={"text": "hi"})
        assert answer.status_code == 401
        assert answer.json()["error"]["type"] == "Unauthenticated"
        answer = await http.post(messages, json={"text": "hi"}, headers=auth("x" * 20))
        assert answer.status_code == 401

        me = (await http.get("/v1/me", headers=ALICE)).json()
        assert me["user_id"] == "alice"

        turn = await http.post(messages, json={"text": "write Q3"}, headers=ALICE)
        assert turn.status_code == 200, turn.text
        assert turn.json()["status"] == "awaiting_approval"
        assert [p["tool_call_id"] for p in turn.json()["pending"]] == ["c1"]

        state = (await http.get(f"/v1/conversations/{sid}", headers=ALICE)).json()
        assert state["status"] == "awaiting_approval"
        assert state["pending"][0]["name"] == "write_record"
        assert [m["type"] for m in state["transcript"]] == ["human", "ai"]
        assert state["temporal_ui_url"].endswith(f"/workflows/conversation-{sid}")

        listed = (
            await http.get("/v1/conversations?status=awaiting_approval", headers=ALICE)
        ).json()
        assert sid in [c["session_id"] for c in listed["conversations"]]
        listed = (await http.get("/v1/conversations?status=idle", headers=ALICE)).json()
        assert sid not in [c["session_id"] for c in listed["conversations"]]
        bobs = (await http.get("/v1/conversations", headers=BOB)).json()
        assert sid not in [c["session_id"] for c in bobs["conversations"]]

        # another user's conversation reads exactly as a missing one, and bob decides nothing
        missing = await http.get("/v1/conversations/no-such-session", headers=ALICE)
        for answer in [
            await http.get(f"/v1/conversations/{sid}", headers=BOB),
            await http.get(f"/v1/conversations/{sid}/events", headers=BOB),
            await http.post(
                f"/v1/conversations/{sid}/decisions",
                json={"decisions": [{"tool_call_id": "c1", "action": "approve"}]},
                headers=BOB,
            ),
            await http.post(messages, json={"text": "hello"}, headers=BOB),
        ]:
            assert answer.status_code == 404, answer.text
            assert answer.json() == {
                "error": {
                    "type": "NotFound",
                    "message": missing.json()["error"]["message"].replace("no-such-session", sid),
                }
            }
        assert runs_of("write_record") == [] or all(
            r["key"] != f"conversation-{sid}:c1" for r in runs_of("write_record")
        )

        # bad input: a clear 4xx each, and the conversation is unharmed
        for body, status in [
            ({}, 422),
            ({"text": 5}, 422),
            ({"text": "x", "force": True}, 422),
            ({"text": "   "}, 422),
            ({"text": "x" * (2 * 1024 * 1024)}, 413),
        ]:
            answer = await http.post(
                f"/v1/conversations/{new_session()}/messages", json=body, headers=ALICE
            )
            assert answer.status_code == status, (
                body if len(str(body)) < 80 else "big",
                answer.text,
            )
            assert answer.json()["error"]["message"]
        answer = await http.post(messages, json={"text": "yes do it"}, headers=ALICE)
        assert answer.status_code == 409
        assert answer.json()["error"]["type"] == "DecisionsOwed"
        answer = await http.post(
            "/v1/conversations/bad%20id/messages", json={"text": "x"}, headers=ALICE
        )
        assert answer.status_code == 422
        assert "session id" in answer.json()["error"]["message"]
        answer = await http.post(
            f"/v1/conversations/{sid}/decisions", json={"decisions": []}, headers=ALICE
        )
        assert answer.status_code == 422
        answer = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={
                "decisions": [
                    {"tool_call_id": "c1", "action": "edit", "args": {"title": "Q3", "force": True}}
                ]
            },
            headers=ALICE,
        )
        assert answer.status_code == 422
        assert "force" in answer.json()["error"]["message"]
        answer = await http.post(
            f"/v1/conversations/{sid}/decisions",
            content=b"{not json",
            headers={**ALICE, "Content-Type": "application/json"},
        )
        assert answer.status_code == 422
        assert answer.json()["error"]["message"].startswith("the request body is not JSON (")
        for headers in ({"Content-Type": "application/json"}, {}):  # curl -d sends a form
            answer = await http.post(messages, content=b"notjson", headers={**ALICE, **headers})
            assert answer.status_code == 422, answer.text
            said = answer.json()["error"]["message"]
            assert said.startswith("the request body is not"), said
            assert "JSON decode error" not in said and not said.startswith("0:"), said

        decided = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": "c1", "action": "approve"}]},
            headers=ALICE,
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["status"] == "completed"
        assert decided.json()["reply"] == "Written."
        assert [r["key"] for r in runs_of("write_record")].count(f"conversation-{sid}:c1") == 1

        state = (await http.get(f"/v1/conversations/{sid}", headers=ALICE)).json()
        decided_entry = next(e for e in state["audit"] if e["event"] == "decided")
        assert decided_entry["actor"] == "alice"
        assert decided_entry["tool_call_id"] == "c1"
        assert decided_entry["detail"]["action"] == "approve"
        assert decided_entry["at"]

        # the event stream from the start, then resumed from an offset
        async with http.stream("GET", f"/v1/conversations/{sid}/events", headers=ALICE) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = await collect_until(stream, lambda seen: finished_runs(seen) == 2)
        check_ag_ui(events)
        assert [int(e.id) for e in events] == list(range(len(events)))
        assert events[0].type == "RUN_STARTED"
        async with http.stream(
            "GET", f"/v1/conversations/{sid}/events", headers={**ALICE, "Last-Event-ID": "3"}
        ) as stream:
            resumed = await collect_until(
                stream, lambda seen: seen[-1].type == "RUN_FINISHED" and int(seen[-1].id) > 6
            )
        assert int(resumed[0].id) == 4
        assert [e.data for e in resumed] == [e.data for e in events[4 : 4 + len(resumed)]]
        async with http.stream(
            "GET", f"/v1/conversations/{sid}/events?after=5", headers=ALICE
        ) as stream:
            first = await collect_until(stream, lambda seen: len(seen) >= 1)
        assert first[0].id == "6"

        spec = (await http.get("/openapi.json")).json()
        assert {
            "/v1/conversations",
            "/v1/conversations/{session_id}",
            "/v1/conversations/{session_id}/messages",
            "/v1/conversations/{session_id}/decisions",
            "/v1/conversations/{session_id}/events",
            "/agui",
        } <= set(spec["paths"])


async def test_turns_stream_their_ag_ui_events(parley_worker) -> None:
    async with (
        parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        sid = new_session()
        async with http.stream(
            "POST",
            f"/v1/conversations/{sid}/messages",
            json={"text": "write Q3"},
            headers={**ALICE, **SSE},
        ) as stream:
            assert stream.status_code == 200
            first = [e async for e in _all(stream)]
        check_ag_ui(first)
        assert first[0].type == "RUN_STARTED"
        finished = first[-1].data
        assert finished["type"] == "RUN_FINISHED"
        assert finished["outcome"]["type"] == "interrupt"
        (interrupt,) = finished["outcome"]["interrupts"]
        assert interrupt["reason"] == "tool_call"
        assert interrupt["toolCallId"] == "c1"
        assert interrupt["expiresAt"]
        schema = interrupt["responseSchema"]
        assert schema["properties"]["action"]["enum"] == ["approve", "edit", "reject", "respond"]
        assert "title" in schema["properties"]["args"]["properties"]

        async with http.stream(
            "POST",
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": "c1", "action": "approve"}]},
            headers={**ALICE, **SSE},
        ) as stream:
            second = [e async for e in _all(stream)]
        check_ag_ui(second)
        result = next(e for e in second if e.type == "TOOL_CALL_RESULT")
        envelope = json.loads(result.data["content"])
        assert envelope["status"] == "success"
        assert envelope["payload"] == {"written": "Q3", "by": "alice"}
        assert second[-1].data["outcome"]["type"] == "success"
        assert int(second[0].id) == int(first[-1].id) + 1

        # a refused request answers its HTTP error before any stream starts
        refused = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": "c1", "action": "reject"}]},
            headers={**ALICE, **SSE},
        )
        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"]["type"] == "NoDecisionsOwed"


async def test_agui_run_agent_input_with_interrupts_and_resume(parley_worker) -> None:
    propose_two = {
        "content": "Two writes.",
        "tool_calls": [
            call("write_record", "w1", title="A"),
            call("write_record", "w2", title="B"),
        ],
    }
    async with (
        parley_worker(registry(), script(propose_two, DONE)) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        sid = new_session()
        user = {"id": "m1", "role": "user", "content": "write A and B"}
        run = {"threadId": sid, "runId": "client-run-1", "messages": [user]}
        async with http.stream("POST", "/agui", json=run, headers=ALICE) as stream:
            events = [e async for e in _all(stream)]
        check_ag_ui(events)
        assert events[0].data["runId"] == "client-run-1"
        interrupts = events[-1].data["outcome"]["interrupts"]
        assert [i["id"] for i in interrupts] == ["w1", "w2"]

        # new input while interrupts are open: refused (409) before any stream,
        # nothing is lost or run
        again = {
            **run,
            "runId": "client-run-2",
            "messages": [user, {"id": "m2", "role": "user", "content": "go"}],
        }
        answer = await http.post("/agui", json=again, headers=ALICE)
        assert answer.status_code == 409
        assert answer.json()["error"]["type"] == "DecisionsOwed"

        resume = {
            "threadId": sid,
            "runId": "client-run-3",
            "messages": [user],
            "resume": [
                {
                    "interruptId": "w1",
                    "status": "resolved",
                    "payload": {"action": "edit", "args": {"title": "A2"}},
                },
                {
                    "interruptId": "w2",
                    "status": "resolved",
                    "payload": {"action": "reject", "message": "not B"},
                },
            ],
        }
        async with http.stream("POST", "/agui", json=resume, headers=ALICE) as stream:
            events = [e async for e in _all(stream)]
        check_ag_ui(events)
        results = {
            e.data["toolCallId"]: json.loads(e.data["content"])
            for e in events
            if e.type == "TOOL_CALL_RESULT"
        }
        assert results["w1"]["status"] == "success"
        assert results["w1"]["payload"]["written"] == "A2"
        assert results["w2"]["status"] == "rejected"
        assert events[-1].data == {
            **events[-1].data,
            "type": "RUN_FINISHED",
            "runId": "client-run-3",
        }

        bad = await http.post(
            "/agui",
            json={**resume, "resume": [{"interruptId": "w1", "status": "resolved", "payload": 7}]},
            headers=ALICE,
        )
        assert bad.status_code == 422
        assert (await http.post("/agui", json={"threadId": sid}, headers=ALICE)).status_code == 422


async def test_every_event_of_a_conversation_is_valid_ag_ui(parley_worker) -> None:
    """Approve, reject, a tool error and an expiry: every event parses with the
    protocol's models; every result is one JSON document."""
    entries = [
        {"content": "", "tool_calls": [call("write_record", "a1", title="ok")]},
        {"content": "", "tool_calls": [call("strict_write", "e1", count=50)]},
        {"content": "too many; sorry."},
        {"content": "", "tool_calls": [call("write_record", "r1", title="no")]},
        {"content": "Understood."},
        {"content": "", "tool_calls": [call("write_record", "x1", title="late")]},
        {"content": "It expired."},
    ]
    async with (
        parley_worker(registry(), script(*entries), pending_expiry_seconds=3) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        sid = new_session()
        decide = f"/v1/conversations/{sid}/decisions"
        await http.post(f"/v1/conversations/{sid}/messages", json={"text": "go"}, headers=ALICE)
        answer = await http.post(
            decide, json={"decisions": [{"tool_call_id": "a1", "action": "approve"}]}, headers=ALICE
        )
        assert answer.json()["status"] == "awaiting_approval"
        answer = await http.post(
            decide, json={"decisions": [{"tool_call_id": "e1", "action": "approve"}]}, headers=ALICE
        )
        assert answer.json()["results"][0]["status"] == "error"
        await http.post(
            f"/v1/conversations/{sid}/messages", json={"text": "another"}, headers=ALICE
        )
        answer = await http.post(
            decide,
            json={"decisions": [{"tool_call_id": "r1", "action": "reject", "message": "no"}]},
            headers=ALICE,
        )
        assert answer.json()["status"] == "completed"
        await http.post(f"/v1/conversations/{sid}/messages", json={"text": "last"}, headers=ALICE)
        async with http.stream("GET", f"/v1/conversations/{sid}/events", headers=ALICE) as stream:
            events = await collect_until(
                stream,
                lambda seen: (
                    any("expired" in e.data.get("content", "") for e in seen)
                    and seen[-1].type == "RUN_FINISHED"
                ),
            )
        check_ag_ui(events)
        statuses = [
            json.loads(e.data["content"])["status"] for e in events if e.type == "TOOL_CALL_RESULT"
        ]
        assert statuses == ["success", "error", "rejected", "expired"]


async def test_a_decision_goes_through_at_once_with_twenty_streams_open(parley_worker) -> None:
    async with (
        parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(
            base_url=base, timeout=60, limits=httpx.Limits(max_connections=50)
        ) as http,
    ):
        sid = new_session()
        await http.post(f"/v1/conversations/{sid}/messages", json={"text": "write"}, headers=ALICE)
        streams_open = 0
        all_open = asyncio.Event()

        async def viewer() -> list[SseEvent]:
            nonlocal streams_open
            async with http.stream(
                "GET", f"/v1/conversations/{sid}/events", headers=ALICE
            ) as stream:
                streams_open += 1
                if streams_open == 20:
                    all_open.set()
                return await collect_until(
                    stream, lambda seen: finished_runs(seen) == 2, seconds=60
                )

        viewers = [asyncio.create_task(viewer()) for _ in range(20)]
        await asyncio.wait_for(all_open.wait(), timeout=30)
        await asyncio.sleep(1)  # every viewer is waiting now
        started = time.monotonic()
        decided = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": "c1", "action": "approve"}]},
            headers=ALICE,
        )
        took = time.monotonic() - started
        assert decided.status_code == 200, decided.text
        assert decided.json()["status"] == "completed"
        assert took < 5, f"the decision took {took:.1f} s with 20 streams open"
        seen = await asyncio.gather(*viewers)
        assert all(finished_runs(events) == 2 for events in seen)


async def _all(stream: httpx.Response) -> AsyncIterator[SseEvent]:
    async for event in sse_events(stream):
        yield event
