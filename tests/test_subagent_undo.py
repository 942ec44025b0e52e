"""End to end: a subagent's call with an undo window. Approved from the parent, it waits
out its window in the subagent's own conversation; the parent lists it (marked with the
subagent) with its own calls in their window, and an undo sent to the parent is passed on
to the subagent: the call never runs, its model is told, and the parent's answer names
only what the subagent undid. Real worker, real dev server."""

from __future__ import annotations

import asyncio

import pytest

from parley.client import ConversationRefused
from parley.contracts import Decision, PolicyRule
from parley.contracts.names import CALL_SCHEDULED_EVENT
from parley.tools import ToolRegistry, auto, confirm
from tests.support.policy_tools import PLANNER, create_plan, list_plans, planner_model, push_branch
from tests.support.transcripts import new_session, runs_in, tool_messages
from tests.support.waiting import eventually

USER = "alice"
CALL = "sub-planner-1-c3"


def registry(undo_seconds: int) -> ToolRegistry:
    rule = PolicyRule(
        name="plans-undoable", tool="create_plan", decide="confirm", undo_seconds=undo_seconds
    )
    return ToolRegistry(
        [confirm(push_branch), confirm(create_plan), auto(list_plans)],
        subagents=[PLANNER],
        rules=[rule],
    )


async def listed_in_window(conversations, session_id: str):
    async def read():
        return (await conversations.state(session_id, USER)).scheduled

    return await eventually(read, what=f"a call listed in its undo window in {session_id}")


async def test_a_subagents_call_undone_from_the_parent_runs_nothing(parley_worker) -> None:
    task = f"record a plan for Q3 ({new_session()})"
    async with parley_worker(registry(600), planner_model(task)) as conversations:
        sid = new_session()
        child = f"{sid}/planner-1"
        turn = await conversations.send(sid, USER, "get the Q3 plan done")
        [pending] = turn.pending
        assert (pending.tool_call_id, pending.undo_seconds) == (CALL, 600)

        approve = [Decision(tool_call_id=CALL, action="approve")]
        deciding = asyncio.create_task(conversations.decide(sid, USER, approve))
        # The call waits in the subagent's conversation, and the parent lists it too.
        [there] = await listed_in_window(conversations, child)
        [here] = await listed_in_window(conversations, sid)
        assert (here.tool_call_id, here.name, here.approved_by) == (CALL, "create_plan", USER)
        assert here.runs_at == there.runs_at and there.subagent is None
        assert here.subagent is not None
        assert (here.subagent.session_id, here.subagent.tool_call_id) == (child, "p1")
        page = await conversations.events(sid, USER)
        told = [e.event for e in page.events if e.event.get("name") == CALL_SCHEDULED_EVENT]
        assert [(t["value"]["tool_call_id"], t["value"]["subagent"]) for t in told] == [
            (CALL, child)
        ]

        # Undone from the parent's session: passed on, and answered once it is undone.
        assert (await conversations.undo(sid, USER, [CALL])).undone == [CALL]
        done = await deciding
        assert done.status == "completed"
        assert runs_in(child, "create_plan") == []
        results = {r.tool_call_id: r for r in done.results}
        assert results[CALL].status == "rejected"
        assert "undid this call" in results[CALL].content

        child_state = await conversations.state(child, USER)
        answers = tool_messages(child_state.transcript)
        assert "alice undid this call" in str(answers[CALL].content)
        events = [a.event for a in child_state.audit if a.tool_call_id == CALL]
        assert events[-2:] == ["scheduled", "undone"] and "ran" not in events
        assert (await conversations.state(sid, USER)).scheduled == []
        with pytest.raises(ConversationRefused) as late:
            await conversations.undo(sid, USER, [CALL])
        assert "not in an undo window" in str(late.value)


async def test_a_subagents_call_runs_once_after_its_window(parley_worker) -> None:
    task = f"record a plan for Q3 ({new_session()})"
    async with parley_worker(registry(2), planner_model(task)) as conversations:
        sid = new_session()
        child = f"{sid}/planner-1"
        await conversations.send(sid, USER, "get the Q3 plan done")
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id=CALL, action="approve")]
        )
        assert done.status == "completed"
        assert {r.tool_call_id: r.status for r in done.results}[CALL] == "success"
        assert len(runs_in(child, "create_plan")) == 1
        # The parent's list let the call go once it left the subagent's window.
        assert (await conversations.state(sid, USER)).scheduled == []
