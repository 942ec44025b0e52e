"""End to end: the undo window. A rule's ``undo_seconds`` makes an approved call wait
(a durable timer) before it runs: an undo inside the window runs nothing (read from the
plans service's rows and request log) and the model is told; after the window the call
runs once and an undo is refused; a worker killed during the window loses nothing and
runs the call once. Audited both ways (``scheduled``, then ``undone`` or ``ran``) and
announced to followers. A real plans service, real workers, the dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from parley.activities.toolsets.plans import build_plans_toolset
from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import Decision, PolicyRule
from parley.contracts.names import CALL_SCHEDULED_EVENT, CALL_UNDONE_EVENT
from parley.tools import ToolRegistry
from tests.support.plans import PLANS_KEY, rows, seen_requests
from tests.support.processes import cli_env, worker_process
from tests.support.scripts import call, script
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

USER = "maria"
PROPOSE = {"content": "", "tool_calls": [call("create_plan", "c1", title="Q4 roadmap")]}


def registry(plans, undo_seconds: int) -> ToolRegistry:
    rule = PolicyRule(
        name="plans-undoable", tool="create_plan", decide="confirm", undo_seconds=undo_seconds
    )
    return ToolRegistry(build_plans_toolset(plans.url, PLANS_KEY), rules=[rule])


def posts(plans) -> list[dict]:
    return [r for r in seen_requests(plans) if r["method"] == "POST"]


async def scheduled(conversations: Conversations, sid: str):
    """The calls waiting out their window, once there are some."""
    return await eventually(
        lambda: _scheduled(conversations, sid), what="the approved call waits in its window"
    )


async def _scheduled(conversations: Conversations, sid: str):
    return (await conversations.state(sid, USER)).scheduled


async def test_an_undo_inside_the_window_runs_nothing_and_the_model_is_told(
    parley_worker, plans
) -> None:
    model = script(PROPOSE, {"content": "Understood, I did not create it."})
    async with parley_worker(registry(plans, 600), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, USER, "plan Q4")
        assert turn.pending[0].undo_seconds == 600
        approve = [Decision(tool_call_id="c1", action="approve")]
        deciding = asyncio.create_task(conversations.decide(sid, USER, approve))
        [waiting] = await scheduled(conversations, sid)
        assert (waiting.tool_call_id, waiting.approved_by) == ("c1", USER)
        assert posts(plans) == []

        # Only the approver or the owner may undo; this is the owner.
        assert (await conversations.undo(sid, USER, ["c1"])).undone == ["c1"]
        done = await deciding
        assert done.status == "completed"
        [result] = done.results
        assert result.status == "rejected" and "undid this call" in result.content
        assert rows(plans, USER) == [] and posts(plans) == []

        state = await conversations.state(sid, USER)
        assert state.scheduled == []
        c1 = [a.event for a in state.audit if a.tool_call_id == "c1"]
        assert c1[-2:] == ["scheduled", "undone"] and "ran" not in c1
        page = await conversations.events(sid, USER)
        names = [e.event.get("name") for e in page.events if e.event.get("type") == "CUSTOM"]
        assert CALL_SCHEDULED_EVENT in names and CALL_UNDONE_EVENT in names

        with pytest.raises(ConversationRefused) as late:
            await conversations.undo(sid, USER, ["c1"])
        assert "not in an undo window" in str(late.value)


async def test_after_the_window_the_call_runs_once(parley_worker, plans) -> None:
    model = script(PROPOSE, {"content": "Created."})
    async with parley_worker(registry(plans, 2), model) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "plan Q4")
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="c1", action="approve")]
        )
        assert done.status == "completed" and done.results[0].status == "success"
        assert [r["title"] for r in rows(plans, USER)] == ["Q4 roadmap"]
        assert len(posts(plans)) == 1
        state = await conversations.state(sid, USER)
        c1 = [a.event for a in state.audit if a.tool_call_id == "c1"]
        assert c1[-2:] == ["scheduled", "ran"]
        with pytest.raises(ConversationRefused) as late:
            await conversations.undo(sid, USER)
        assert "nothing to undo" in str(late.value)


async def test_a_worker_killed_during_the_window_loses_nothing_and_runs_once(
    client, payload_store, plans, tmp_path: Path
) -> None:
    queue = f"parley-undo-{uuid.uuid4().hex[:8]}"
    script_file = tmp_path / "script.json"
    script_file.write_text(
        '[{"content": "", "tool_calls": [{"name": "create_plan", "id": "c1", '
        '"args": {"title": "Q4 roadmap"}}]}, {"content": "Created."}]'
    )
    policies = tmp_path / "policies.toml"
    policies.write_text(
        '[[rule]]\nname = "plans-undoable"\ntool = "create_plan"\ndecide = "confirm"\n'
        "undo_seconds = 4\n"
    )
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{script_file}",
        "PARLEY_TOOLS": "parley.activities.toolsets.plans:toolset",
        "PARLEY_PLANS_URL": plans.url,
        "PARLEY_PLANS_API_KEY": PLANS_KEY,
        "PARLEY_POLICIES": str(policies),
    }
    conversations = Conversations(client, Settings(task_queue=queue))
    sid = new_session()
    log = tmp_path / "worker.log"
    with worker_process(env, log):
        await eventually(conversations.workers_polling, what="the first worker polls")
        turn = await conversations.send(sid, USER, "plan Q4")
        assert turn.pending[0].undo_seconds == 4
        approve = [Decision(tool_call_id="c1", action="approve")]
        deciding = asyncio.create_task(conversations.decide(sid, USER, approve))
        await scheduled(conversations, sid)
    # The first worker was killed (SIGKILL) in the window; nothing ran.
    assert posts(plans) == []
    with worker_process(env, log):
        done = await deciding
        assert done.status == "completed" and done.results[0].status == "success"
    assert [r["title"] for r in rows(plans, USER)] == ["Q4 roadmap"]
    assert len(posts(plans)) == 1
