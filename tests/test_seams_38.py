"""Adversarial seams of undo and revert. Signals have no validators and no sender: a
``subagent_window`` or ``undo_signal`` sent by a stranger (the raw Temporal client, as
``temporal workflow signal`` would), malformed or well formed, fails neither the run
nor a workflow task, and an undo of everything from the parent still answers with what
was undone even when a forged window listed a call the subagent never had. Over AG-UI,
a malformed ``forwardedProps.parley`` (too many calls, wrong types) is refused in one
line before any stream. Real dev server, worker and gateway; the model is a script."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError

from parley.contracts import Decision, ScheduledCall
from parley.contracts.names import (
    DECIDE_SIGNAL,
    STREAM_DELTA_SIGNAL,
    SUBAGENT_REPORT_SIGNAL,
    SUBAGENT_WINDOW_SIGNAL,
    UNDO_SIGNAL,
)
from parley.contracts.undo import SubagentWindow, UndoInput
from parley.tools import ToolRegistry, auto
from tests.support import ByConversation, call, script
from tests.support.cli import assert_one_line_error, parley_against
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.policy_tools import list_plans
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually
from tests.test_subagent_undo import CALL, USER, registry

GHOST = "sub-planner-1-ghost"
OTHER = "sub-planner-1-c4"


async def stranger_signals(handle: Any, name: str, payloads: list[Any]) -> None:
    for payload in payloads:
        await handle.signal(name, payload)


def two_plans_model(task: str) -> ByConversation:
    """The parent hands ``task`` to the planner, which proposes two plans at once."""
    return ByConversation(
        scripts={
            "get the Q3 plan done": script(
                {"tool_calls": [call("planner", "p1", task=task)]}, {"content": "Done."}
            ),
            task: script(
                {
                    "tool_calls": [
                        call("create_plan", "c3", title="Q3"),
                        call("create_plan", "c4", title="Q4"),
                    ]
                },
                {"content": "Plans recorded."},
            ),
        }
    )


async def test_strangers_signals_fail_nothing_and_an_undo_still_answers(parley_worker) -> None:
    task = f"record two plans ({new_session()})"
    async with parley_worker(registry(600), two_plans_model(task)) as conversations:
        sid = new_session()
        child = f"{sid}/planner-1"
        turn = await conversations.send(sid, USER, "get the Q3 plan done")
        assert {p.tool_call_id for p in turn.pending} == {CALL, OTHER}
        approve = [Decision(tool_call_id=i, action="approve") for i in (CALL, OTHER)]
        deciding = asyncio.create_task(conversations.decide(sid, USER, approve))

        async def both_listed() -> bool:
            listed = (await conversations.state(sid, USER)).scheduled
            return {s.tool_call_id for s in listed} == {CALL, OTHER}

        await eventually(both_listed, what="both calls listed in the parent's window")
        parent, sub = conversations.handle(sid), conversations.handle(child)

        # Malformed payloads, and well-formed ones naming what does not exist.
        junk: list[Any] = [{"junk": 1}, "not an object", [1, 2], None, {"tool_call_id": 7}]
        await stranger_signals(parent, SUBAGENT_WINDOW_SIGNAL, junk)
        await stranger_signals(parent, UNDO_SIGNAL, junk)
        await stranger_signals(sub, SUBAGENT_WINDOW_SIGNAL, junk)
        for name in (SUBAGENT_WINDOW_SIGNAL, UNDO_SIGNAL, SUBAGENT_REPORT_SIGNAL, "upgrade"):
            await parent.signal(name, args=[])  # no argument
            await parent.signal(name, args=[{"tool_call_id": "p1"}, None])  # two
        await stranger_signals(parent, SUBAGENT_REPORT_SIGNAL, [None])
        await stranger_signals(parent, STREAM_DELTA_SIGNAL, [None])
        await stranger_signals(parent, DECIDE_SIGNAL, [None])
        # Updates do have validators: malformed ones are refused, never a failed task.
        for update, args in (
            ("undo", []),
            ("undo", [None]),
            ("undo", [{"user_id": USER, "tool_call_ids": [CALL] * 65}]),
            ("revoke_grant", [{"user_id": USER, "grant_id": ""}]),
            ("revoke_grant", [{"user_id": "mallory", "grant_id": CALL}]),
            ("revert", [{"user_id": USER, "tool_call_id": 7}]),
        ):
            with pytest.raises(WorkflowUpdateFailedError):
                await parent.execute_update(update, args=args)
        unknown = SubagentWindow(tool_call_id="no-such-delegation", left=[CALL], undone=[CALL])
        await parent.signal(SUBAGENT_WINDOW_SIGNAL, unknown)
        # To a conversation that is no subagent, an undo_signal is nobody's to pass on.
        await parent.signal(UNDO_SIGNAL, UndoInput(user_id=USER, tool_call_ids=[CALL]))
        # A forged window for the subagent at work lists a call it never had.
        ghost = ScheduledCall(
            tool_call_id=GHOST,
            name="create_plan",
            runs_at=datetime.now(UTC) + timedelta(hours=1),
            approved_by=USER,
        )
        forged = SubagentWindow(tool_call_id="p1", scheduled=[ghost])
        await parent.signal(SUBAGENT_WINDOW_SIGNAL, forged)

        async def ghost_listed() -> bool:
            listed = (await conversations.state(sid, USER)).scheduled
            return {s.tool_call_id for s in listed} == {CALL, OTHER, GHOST}

        await eventually(ghost_listed, what="the forged entry to reach the parent's list")
        # Nothing ended or failed, and the real calls still wait (nobody undid them).
        for handle in (parent, sub):
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        there = (await conversations.state(child, USER)).scheduled
        assert {(s.tool_call_id, s.undone_by) for s in there} == {(CALL, None), (OTHER, None)}

        # The owner undoes one real call and the ghost while the subagent stays at work
        # (its other call waits out its window): the subagent undoes its call and says
        # it never had the ghost, so the answer comes now, naming only what was undone.
        undoing = asyncio.create_task(conversations.undo(sid, USER, [CALL, GHOST]))
        await eventually(undoing.done, seconds=120, what="the undo to answer")
        assert undoing.result().undone == [CALL]
        listed = (await conversations.state(sid, USER)).scheduled
        assert [s.tool_call_id for s in listed if s.undone_by is None] == [OTHER]
        assert (await conversations.undo(sid, USER, [OTHER])).undone == [OTHER]
        done = await deciding
        statuses = {r.tool_call_id: r.status for r in done.results}
        assert (statuses[CALL], statuses[OTHER]) == ("rejected", "rejected")
        assert runs_in(child, "create_plan") == []
        assert (await conversations.state(sid, USER)).scheduled == []
        # The parent goes on; the subagent ended as its task did, not failed.
        assert (await parent.describe()).status == WorkflowExecutionStatus.RUNNING
        ended = (await sub.describe()).status
        assert ended in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED)


async def test_a_malformed_forwarded_props_parley_is_one_line_before_any_stream(
    parley_worker,
) -> None:
    model = script({"content": "hello"})
    async with (
        parley_worker(ToolRegistry([auto(list_plans)]), model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()

        def asking(props: Any) -> dict[str, Any]:
            return {"threadId": sid, "runId": "r-x", "messages": [], "forwardedProps": props}

        cases: dict[str, Any] = {
            "names 65 calls": {"parley": {"undo": [f"c{i}" for i in range(65)]}},
            "must name a call": {"parley": {"undo": [["c1"]]}},
            "got a JSON NoneType": {"parley": None},
            "got the keys revert, undo": {"parley": {"undo": "c1", "revert": "c1"}},
            "of 1 to 128 characters": {"parley": {"revert": "x" * 129}},
            "got no key": {"parley": {}},
        }
        for expected, props in cases.items():
            answer = await http.post("/agui", json=asking(props), headers=auth(ALICE_TOKEN))
            assert answer.status_code == 422, (expected, answer.text)
            message = answer.json()["error"]["message"]
            assert expected in message and "\n" not in message, (expected, message)
        # Sixty-four is an undo like any other: refused only because nothing waits.
        many = {"parley": {"undo": [f"c{i}" for i in range(64)]}}
        answer = await http.post("/agui", json=asking(many), headers=auth(ALICE_TOKEN))
        assert answer.status_code in (404, 409, 422), answer.text
        assert "names 64 calls" not in answer.text


async def test_an_undo_naming_too_many_calls_is_one_line(parley_worker, client) -> None:
    """``parley undo`` with more calls than one undo takes: one ``error:`` line."""
    async with parley_worker(ToolRegistry([auto(list_plans)]), script({"content": "hi"})) as conv:
        sid = new_session()
        assert (await conv.send(sid, USER, "hello")).status == "completed"
        many = [arg for i in range(65) for arg in ("-c", f"c{i}")]
        result = await parley_against(conv, client, "undo", "-s", sid, "-u", USER, *many)
        assert_one_line_error(result, "an undo names at most 64 calls, not 65")
