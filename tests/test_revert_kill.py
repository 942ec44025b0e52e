"""End to end: a worker killed during a compensation. A created plan is reverted, its
inverse ``delete_plan`` approved, and the worker process is killed (SIGKILL) while the
DELETE is at the plans service (held there until the worker is dead). A new worker
finishes the decision: the plan is gone, the service's request log shows one DELETE
that took effect (any other is the same idempotency key answered as a replay), and the
audit links the call and its inverse once each. A real plans service, real worker
processes, the dev server."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.client import Conversations
from parley.client.reverts import revert
from parley.config.settings import Settings
from parley.contracts import RUN_TOOL, Decision
from parley.services.plans import BackgroundServer, create_app
from tests.support.plans import PLANS_KEY, activity_attempts, fetch, rows, seen_requests
from tests.support.processes import cli_env, worker_process
from tests.support.scripts import call
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

USER = "maria"
SCRIPT = [
    {"content": "", "tool_calls": [call("create_plan", "c1", title="Q4 roadmap")]},
    {"content": "Created."},
    {"content": "(Parley proposes the inverse)"},  # the revert's proposal is Parley's own
    {"content": "Deleted it again."},
]


class HeldDelete:
    """The plans service, holding the first DELETE until ``release`` (set once the
    worker that sent it is dead)."""

    def __init__(self) -> None:
        self.arrived, self.release = threading.Event(), threading.Event()

    async def __call__(self, request: Any, call_next: Any) -> Any:
        if request.method == "DELETE" and not self.arrived.is_set():
            self.arrived.set()
            await asyncio.to_thread(self.release.wait)
        return await call_next(request)


@pytest.fixture
def held_plans(tmp_path: Path) -> Iterator[tuple[BackgroundServer, HeldDelete]]:
    app = create_app(tmp_path / "plans.db", PLANS_KEY, enable_test_hooks=True)
    hold = HeldDelete()
    app.middleware("http")(hold)  # outermost: the service's own hooks log what it does
    with BackgroundServer(app) as server:
        yield server, hold
    hold.release.set()


def approve(call_id: str) -> list[Decision]:
    return [Decision(tool_call_id=call_id, action="approve")]


async def test_a_worker_killed_during_a_compensation_loses_nothing_and_runs_nothing_twice(
    client, payload_store, held_plans, tmp_path: Path
) -> None:
    plans, hold = held_plans
    queue = f"parley-revert-{uuid.uuid4().hex[:8]}"
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(SCRIPT))
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{script_file}",
        "PARLEY_TOOLS": "parley.activities.toolsets.plans:toolset",
        "PARLEY_PLANS_URL": plans.url,
        "PARLEY_PLANS_API_KEY": PLANS_KEY,
    }
    conversations = Conversations(client, Settings(task_queue=queue))
    sid = new_session()
    log = tmp_path / "worker.log"
    with worker_process(env, log):
        await eventually(conversations.workers_polling, what="the first worker polls")
        await conversations.send(sid, USER, "plan Q4")
        await conversations.decide(sid, USER, approve("c1"))
        [plan] = rows(plans, USER)
        turn = await revert(conversations, sid, USER, "c1")
        [inverse] = turn.pending
        assert (inverse.tool_call_id, inverse.name) == ("revert-c1", "delete_plan")
        deciding = asyncio.create_task(conversations.decide(sid, USER, approve("revert-c1")))
        await eventually(hold.arrived.is_set, 60, "the inverse's DELETE reaches the service")
    # The worker was killed (SIGKILL) with the DELETE in flight; the service goes on.
    hold.release.set()
    with worker_process(env, log):
        done = await deciding
        state = await conversations.state(sid, USER)
        history = await fetch(conversations, sid)
    assert done.status == "completed" and done.reply == "Deleted it again."
    [result] = [r for r in done.results if r.tool_call_id == "revert-c1"]
    assert result.status == "success"
    assert rows(plans, USER) == []

    deletes = [r for r in seen_requests(plans) if r["method"] == "DELETE"]
    assert {r["path"] for r in deletes} == {f"/plans/{plan['id']}"}
    assert {r["idempotency_key"] for r in deletes} == {f"conversation-{sid}:revert-c1"}
    took_effect = [r for r in deletes if r["status"] == 200 and not r["replayed"]]
    assert len(took_effect) == 1, deletes
    assert all(r["replayed"] for r in deletes if r not in took_effect), deletes
    # The inverse ran on the second attempt: the first died with its worker.
    assert activity_attempts(history, RUN_TOOL)[-1] == 2

    entries = [(a.tool_call_id, a.event) for a in state.audit]
    for entry in [
        ("c1", "revert_proposed"),
        ("revert-c1", "proposed"),
        ("revert-c1", "decided"),
        ("revert-c1", "ran"),
    ]:
        assert entries.count(entry) == 1, (entry, entries)
    linked = {(a.tool_call_id, a.event): a.detail for a in state.audit}
    assert linked[("c1", "revert_proposed")] == {"inverse": "revert-c1"}
    assert linked[("revert-c1", "proposed")]["reverts"] == "c1"
