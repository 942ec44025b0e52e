"""Notifications: a worker with ``notify_url`` POSTs to a real webhook on 127.0.0.1 when a
conversation starts waiting for a decision. The turn does not wait for the webhook; a
transient failure is retried with one idempotency key; a refusal (4xx) is final and
recorded in the audit log; without ``notify_url`` nothing is sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.client import Client

from parley.contracts import NOTIFY, AuditEntry, Decision, workflow_id_for
from tests.support import call, registry, script
from tests.support.transcripts import new_session
from tests.support.waiting import eventually
from tests.support.webhook import Webhook

PROPOSE = {"content": "I will write it.", "tool_calls": [call("write_record", "c1", title="Q3")]}
DONE = {"content": "Written."}
PAGE = "http://gateway.example:8770"


async def notified(conversations: Any, sid: str) -> list[AuditEntry]:
    state = await conversations.state(sid, "alice")
    return [entry for entry in state.audit if entry.event == "notified"]


async def notify_activities_scheduled(client: Client, sid: str) -> int:
    """How many ``notify`` activities the conversation's history schedules (a retry is
    an attempt of the same activity, not a new one)."""
    history = await client.get_workflow_handle(workflow_id_for(sid)).fetch_history()
    return sum(
        1
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == NOTIFY
    )


async def test_the_webhook_is_told_in_the_background_and_retried_with_one_key(
    parley_worker, client: Client
) -> None:
    webhook = Webhook(503, 200)
    webhook.release.clear()  # the webhook answers nothing until the test says so
    with webhook:
        async with parley_worker(
            registry(),
            script(PROPOSE, DONE),
            notify_url=webhook.url,
            gateway_public_url=PAGE,
        ) as conversations:
            sid = new_session()
            turn = await conversations.send(sid, "alice", "write Q3")
            assert turn.status == "awaiting_approval"
            # the turn came back while the webhook had answered nothing (not even the 503)
            assert webhook.answered == []
            await eventually(lambda: webhook.requests, what="the webhook is called")
            assert len(webhook.requests) == 1 and webhook.answered == []
            assert await notified(conversations, sid) == []  # still in flight

            webhook.release.set()
            await eventually(lambda: len(webhook.answered) == 2, what="the webhook answers twice")
            assert webhook.answered == [503, 200]

            (first_headers, body), (second_headers, again) = webhook.requests
            assert body == again
            assert first_headers["idempotency-key"] == f"conversation-{sid}:run-1"
            assert second_headers["idempotency-key"] == first_headers["idempotency-key"]
            assert first_headers["content-type"].startswith("application/json")
            assert body["event"] == "awaiting_decision"
            assert body["session_id"] == sid
            assert body["user_id"] == "alice"
            assert body["run_id"] == "run-1"
            assert len(body["pending"]) == 1
            assert body["pending"][0]["tool_call_id"] == "c1"
            assert body["pending"][0]["name"] == "write_record"
            assert body["pending"][0]["args"] == {"title": "Q3"}
            assert body["url"] == f"{PAGE}/#c={sid}"

            (entry,) = await eventually(
                lambda: notified(conversations, sid), what="the audit log records the notification"
            )
            assert entry.actor == "worker"
            assert "error" not in entry.detail
            assert entry.detail.get("run_id") == "run-1"

            result = await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
            assert result.status == "completed"
            assert result.reply == "Written."
            # longer than the notify retry interval (2 s): nothing more arrives
            await asyncio.sleep(3)
            assert len(webhook.requests) == 2
            assert len(await notified(conversations, sid)) == 1
            assert await notify_activities_scheduled(client, sid) == 1


async def test_a_webhook_that_refuses_is_not_retried_and_the_failure_is_recorded(
    parley_worker, client: Client
) -> None:
    webhook = Webhook(400)
    with webhook:
        async with parley_worker(
            registry(), script(PROPOSE, DONE), notify_url=webhook.url
        ) as conversations:
            sid = new_session()
            turn = await conversations.send(sid, "alice", "write Q3")
            assert turn.status == "awaiting_approval"

            (entry,) = await eventually(
                lambda: notified(conversations, sid), what="the audit log records the failure"
            )
            # recorded after the activity's final failure: one request, no retry
            assert len(webhook.requests) == 1
            assert webhook.answered == [400]
            assert "webhook" in entry.detail["error"]
            assert "400" in entry.detail["error"]
            # without gateway_public_url the link goes to the gateway's host and port
            assert webhook.requests[0][1]["url"] == f"http://127.0.0.1:8770/#c={sid}"

            state = await conversations.state(sid, "alice")
            assert state.status == "awaiting_approval"
            assert [p.tool_call_id for p in state.pending] == ["c1"]
            result = await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
            assert result.status == "completed"
            assert [(r.tool_call_id, r.status) for r in result.results] == [("c1", "success")]
            assert len(webhook.requests) == 1
            assert await notify_activities_scheduled(client, sid) == 1


async def test_without_a_webhook_nothing_is_notified(parley_worker, client: Client) -> None:
    webhook = Webhook(200)  # listening, but the worker is not told about it
    with webhook:
        async with parley_worker(
            registry(), script(PROPOSE, DONE), gateway_public_url=PAGE
        ) as conversations:
            sid = new_session()
            turn = await conversations.send(sid, "alice", "write Q3")
            assert turn.status == "awaiting_approval"
            await asyncio.sleep(1)
            result = await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
            assert result.status == "completed"
            assert await notified(conversations, sid) == []
            assert await notify_activities_scheduled(client, sid) == 0
            assert webhook.requests == []


async def test_a_decision_stops_retries_and_the_message_hides_the_webhook_url(
    parley_worker,
) -> None:
    """A webhook that keeps failing is not told "awaiting decision" after the decision,
    and the failure recorded names the status, never the URL (it may hold a token)."""
    webhook = Webhook(503)
    with webhook:
        async with parley_worker(
            registry(), script(PROPOSE, DONE), notify_url=f"{webhook.url}/T000/SECRET-PATH"
        ) as conversations:
            sid = new_session()
            await conversations.send(sid, "alice", "write Q3")
            await eventually(lambda: len(webhook.requests) >= 1, what="the first attempt")
            result = await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
            assert result.status == "completed"
            (entry,) = await eventually(
                lambda: notified(conversations, sid), what="the cancelled notification"
            )
            assert "decided before the webhook answered" in entry.detail["error"]
            seen = len(webhook.requests)
            await asyncio.sleep(5)  # past two retry intervals (2 s, 4 s)
            assert len(webhook.requests) == seen
            state = await conversations.state(sid, "alice")
            assert "SECRET-PATH" not in json.dumps([e.model_dump(mode="json") for e in state.audit])
