"""Notifications: a worker with ``PARLEY_NOTIFY_URL`` POSTs the pending calls to a real
webhook on 127.0.0.1 when a conversation starts waiting, in the background of the turn,
retried with one idempotency key; a webhook's 4xx is not retried and is recorded."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fastapi import FastAPI, Request, Response
from parley.services.plans.server import BackgroundServer

from parley.contracts import Decision
from tests.checks import new_session
from tests.support import call, registry, script

PROPOSE_WRITE = {"content": "Writing.", "tool_calls": [call("write_record", "c1", title="Q3")]}
DONE = {"content": "Written."}
PAGE = "http://gateway.example:8770"


class Webhook:
    """A real HTTP webhook that answers ``statuses`` in turn (then the last one), and
    holds its answers until ``release`` is set."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.received: list[tuple[dict[str, str], Any]] = []
        self.release = threading.Event()
        self.release.set()
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> Response:
            self.received.append((dict(request.headers), await request.json()))
            await asyncio.to_thread(self.release.wait, 30)
            status = self.statuses[min(len(self.received), len(self.statuses)) - 1]
            return Response(status_code=status)

        self.server = BackgroundServer(app)

    @property
    def url(self) -> str:
        return f"{self.server.url}/hook"


async def eventually(check, seconds: float = 40) -> Any:
    for _ in range(int(seconds * 10)):
        value = await check() if asyncio.iscoroutinefunction(check) else check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_the_webhook_is_told_once_calls_wait_and_retried_with_one_key(
    parley_worker,
) -> None:
    webhook = Webhook(503, 200)
    webhook.release.clear()  # the webhook holds its first answer: the turn must not wait
    with webhook.server:
        async with parley_worker(
            registry(), script(PROPOSE_WRITE, DONE), notify_url=webhook.url, gateway_public_url=PAGE
        ) as conversations:
            sid = new_session()
            turn = await conversations.send(sid, "alice", "write Q3")
            assert turn.status == "awaiting_approval"
            await eventually(lambda: webhook.received)
            assert len(webhook.received) == 1  # the turn came back while it was held
            webhook.release.set()
            await eventually(lambda: len(webhook.received) == 2)

            (first_headers, body), (second_headers, again) = webhook.received
            assert body == again
            key = first_headers["idempotency-key"]
            assert key == second_headers["idempotency-key"] == f"conversation-{sid}:run-1"
            assert body["event"] == "awaiting_decision"
            assert body["session_id"] == sid and body["user_id"] == "alice"
            assert [(p["tool_call_id"], p["name"]) for p in body["pending"]] == [
                ("c1", "write_record")
            ]
            assert body["url"] == f"{PAGE}/#c={sid}"

            async def notified():
                state = await conversations.state(sid, "alice")
                return [e for e in state.audit if e.event == "notified"]

            (entry,) = await eventually(notified)
            assert "error" not in entry.detail
            result = await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
            assert result.status == "completed"
            await asyncio.sleep(1)
            assert len(webhook.received) == 2  # no longer waiting: nobody is told again


async def test_a_refusing_webhook_is_not_retried_and_the_failure_is_recorded(
    parley_worker,
) -> None:
    webhook = Webhook(400)
    with webhook.server:
        async with parley_worker(
            registry(), script(PROPOSE_WRITE, DONE), notify_url=webhook.url
        ) as conversations:
            sid = new_session()
            await conversations.send(sid, "alice", "write Q3")

            async def notified():
                state = await conversations.state(sid, "alice")
                return [e for e in state.audit if e.event == "notified"]

            (entry,) = await eventually(notified)
            assert "notification webhook" in entry.detail["error"]
            assert len(webhook.received) == 1
            result = await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )
            assert result.status == "completed"


async def test_without_a_webhook_nothing_is_notified(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")
        await conversations.decide(sid, "alice", [Decision(tool_call_id="c1", action="approve")])
        state = await conversations.state(sid, "alice")
        assert not [e for e in state.audit if e.event == "notified"]
