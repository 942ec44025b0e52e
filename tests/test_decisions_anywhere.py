"""Decisions from outside Parley's clients: the ``temporal`` CLI's update (plain JSON,
as the Temporal UI's "Send an update" dialog sends it) and the fire-and-forget
``decide_signal``, which is applied once and records a refused one, never drops it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support import call, registry, runs_of, script
from tests.support.cli import temporal
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

PROPOSE_WRITE = {"content": "Writing.", "tool_calls": [call("write_record", "c1", title="Q3")]}
DONE = {"content": "Written."}


def decision(tool_call_id: str, action: str, by: str = "alice", **extra: Any) -> str:
    return json.dumps(
        {"decisions": [{"tool_call_id": tool_call_id, "action": action, **extra}], "decided_by": by}
    )


async def test_the_temporal_cli_approves_with_plain_json(client, parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        workflow_id = f"conversation-{sid}"
        assert (await conversations.send(sid, "alice", "write Q3")).status == "awaiting_approval"

        # an invalid decision is refused by the validator: nothing runs, nothing is recorded
        refused = await asyncio.to_thread(
            temporal,
            client,
            "workflow", "update", "execute", "-w", workflow_id, "--name", "decide",
            "--input", decision("nope", "approve"),
        )  # fmt: skip
        assert refused.returncode != 0
        assert "unknown or no longer pending: nope" in refused.stderr + refused.stdout
        refused = await asyncio.to_thread(
            temporal,
            client,
            "workflow", "update", "execute", "-w", workflow_id, "--name", "decide",
            "--input", decision("c1", "approve", by="mallory"),
        )  # fmt: skip
        assert refused.returncode != 0
        assert "belongs to another user" in refused.stderr + refused.stdout
        assert not [r for r in runs_of("write_record") if r["key"] == f"{workflow_id}:c1"]

        approved = await asyncio.to_thread(
            temporal,
            client,
            "workflow", "update", "execute", "-w", workflow_id, "--name", "decide",
            "--input", decision("c1", "approve"),
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert '"completed"' in approved.stdout or "completed" in approved.stdout
        assert len([r for r in runs_of("write_record") if r["key"] == f"{workflow_id}:c1"]) == 1
        state = await conversations.state(sid, "alice")
        assert state.status == "idle"
        assert [e.actor for e in state.audit if e.event == "decided"] == ["alice"]


async def test_a_decision_signal_applies_once_and_a_stale_one_is_recorded(
    client, parley_worker
) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        workflow_id = f"conversation-{sid}"
        await conversations.send(sid, "alice", "write Q3")

        # the same signal twice (a webhook retried): applied once, the second refused
        for _ in range(2):
            sent = await asyncio.to_thread(
                temporal,
                client,
                "workflow", "signal", "-w", workflow_id, "--name", "decide_signal",
                "--input", decision("c1", "approve"),
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr

        async def settled():
            state = await conversations.state(sid, "alice")
            refusals = [e for e in state.audit if e.event == "decision_refused"]
            return state if state.status == "idle" and refusals else None

        state = await eventually(settled)
        assert len([r for r in runs_of("write_record") if r["key"] == f"{workflow_id}:c1"]) == 1
        (refusal,) = [e for e in state.audit if e.event == "decision_refused"]
        assert refusal.actor == "alice"
        assert refusal.detail["type"] == "NoDecisionsOwed"
        assert refusal.detail["decisions"] == [{"tool_call_id": "c1", "action": "approve"}]

        # a malformed one and another user's are recorded too, and an event says so
        handle = client.get_workflow_handle(workflow_id)
        await handle.signal("decide_signal", {"decisions": "yes please"})
        await handle.signal("decide_signal", json.loads(decision("c1", "approve", by="mallory")))

        async def three_refusals():
            state = await conversations.state(sid, "alice")
            found = [e for e in state.audit if e.event == "decision_refused"]
            return found if len(found) == 3 else None

        refusals = await eventually(three_refusals)
        assert refusals[1].detail["type"] == "InvalidDecision"
        assert refusals[2].actor == "mallory"
        assert refusals[2].detail["type"] == "NotConversationOwner"
        page = await conversations.events(sid, "alice")
        custom = [
            e.event
            for e in page.events
            if e.event["type"] == "CUSTOM" and e.event["name"] != "parley.usage"  # usage events
        ]
        assert [c["name"] for c in custom] == ["parley.decision_refused"] * 3
        assert (await conversations.state(sid, "alice")).status == "idle"
