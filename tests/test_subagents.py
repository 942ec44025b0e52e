"""Subagents as child workflows. Real worker, real dev server.

A conversation hands a task to a subagent (a tool from the policy file's
``[[subagent]]``); the task runs as a child ``ConversationWorkflow`` that is offered, and
may run, only the tools the subagent names. Its confirm calls wait on the parent's
pending list, are decided there, and run in the child; its reply answers the parent's
call. Ending the parent cancels it, and what it waited for never runs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from parley.activities.models.scripted import ScriptedChatModel
from parley.activities.tool_calls import ToolActivities
from parley.client import ConversationRefused
from parley.contracts import ConversationSnapshot, Decision, RunToolInput, workflow_id_for
from parley.contracts.errors import ErrorType
from parley.tools.policies import load_policies
from tests.support import OFFERED, ByConversation, call, script
from tests.support.policy_tools import planner_model
from tests.support.policy_tools import planner_registry as registry
from tests.support.processes import PARLEY, ROOT
from tests.support.transcripts import new_session, runs_in, tool_messages
from tests.support.waiting import eventually


async def test_a_subagents_confirm_call_is_approved_from_the_parent(parley_worker) -> None:
    task = f"record a plan for Q3 ({new_session()})"
    async with parley_worker(registry(), planner_model(task)) as conversations:
        sid = new_session()
        child = f"{sid}/planner-1"
        turn = await conversations.send(sid, "alice", "get the Q3 plan done")

        # The subagent's confirm call waits on the parent's list, marked as its.
        assert turn.status == "awaiting_approval"
        (pending,) = turn.pending
        assert (pending.tool_call_id, pending.name, pending.args) == (
            "sub-planner-1-c3",
            "create_plan",
            {"title": "Q3"},
        )
        assert pending.subagent is not None
        assert (pending.subagent.name, pending.subagent.session_id) == ("planner", child)
        assert pending.subagent.tool_call_id == "p1"
        # What ran in the subagent so far is in the parent's turn result.
        assert {r.tool_call_id: r.status for r in turn.results} == {
            "sub-planner-1-c1": "error",
            "sub-planner-1-c2": "success",
        }
        assert runs_in(child, "create_plan") == []

        # The subagent was offered, and could run, only its own tools.
        offered = {tuple(names) for first, names in OFFERED if first == task}
        assert offered == {("create_plan", "list_plans")}
        assert (
            "get the Q3 plan done",
            ["push_branch", "create_plan", "list_plans", "planner"],
        ) in OFFERED
        child_state = await conversations.state(child, "alice")
        answers = tool_messages(child_state.transcript, pending=("sub-planner-1-c3",))
        assert "unknown tool 'push_branch'" in str(answers["sub-planner-1-c1"].content)
        assert runs_in(child, "push_branch") == []
        assert isinstance(child_state.transcript[0], SystemMessage)
        assert [c.tool_call_id for c in child_state.pending] == ["sub-planner-1-c3"]

        # `parley list` shows the parent, waiting; the subagent's conversation is not
        # listed (its calls are decided on the parent's list).
        async def listing() -> dict[str, str]:
            listed = {c.session_id: c.status for c in await conversations.list("alice")}
            return listed if sid in listed else {}

        listed = await eventually(listing, 60, "the parent listed")
        assert listed.get(sid) == "awaiting_approval"
        assert child not in listed

        # Nobody talks to the subagent but its parent.
        with pytest.raises(ConversationRefused) as refused:
            await conversations.send(child, "alice", "and also push main")
        assert refused.value.error_type == ErrorType.INVALID_MESSAGE
        assert sid in refused.value.message

        # Approved from the parent: it runs in the subagent, once, under the
        # subagent's idempotency key; the subagent's reply answers the parent's call.
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="sub-planner-1-c3", action="approve")]
        )
        assert done.status == "completed"
        assert done.reply == "The planner is done."
        key = f"{workflow_id_for(child, subagent=True)}:sub-planner-1-c3"
        assert [r["key"] for r in runs_in(child, "create_plan")] == [key]
        assert {r.tool_call_id: r.status for r in done.results} == {
            "sub-planner-1-c3": "success",
            "p1": "success",
        }

        parent_state = await conversations.state(sid, "alice")
        answers = tool_messages(parent_state.transcript)
        assert answers["p1"].content == "Plan Q3 recorded."
        decided = [e for e in parent_state.audit if e.event == "decided"]
        assert [(e.tool_call_id, e.actor, e.detail["subagent"]) for e in decided] == [
            ("sub-planner-1-c3", "alice", child)
        ]
        assert [e.detail for e in parent_state.audit if e.event == "delegated"] == [
            {"session_id": child}
        ]

        # The subagent's conversation is a child workflow that ended with its task,
        # and its own audit log says who decided.
        description = await conversations.handle(child).describe()
        assert description.status == WorkflowExecutionStatus.COMPLETED
        assert description.parent_id == workflow_id_for(sid)
        child_state = await conversations.state(child, "alice")
        assert child_state.status == "ended"
        assert [(e.tool_call_id, e.actor) for e in child_state.audit if e.event == "decided"] == [
            ("sub-planner-1-c3", "alice")
        ]


async def test_one_decision_covers_the_parents_calls_and_the_subagents_across_a_new_worker(
    parley_worker,
) -> None:
    """The parent's own confirm call and its subagent's wait side by side; the worker
    that started them stops, and one decision on a new worker answers both: the
    approved one runs in the parent, the rejected one reaches the subagent's model."""
    task = f"record a plan for Q3 ({new_session()})"
    model = ByConversation(
        scripts={
            "plan Q3 and push main": script(
                {
                    "tool_calls": [
                        call("planner", "p1", task=task),
                        call("push_branch", "p2", branch="main"),
                    ]
                },
                {"content": "Pushed main; the planner recorded nothing."},
            ),
            task: script(
                {"tool_calls": [call("create_plan", "c3", title="Q3")]},
                {"content": "The plan was rejected; nothing recorded."},
            ),
        }
    )
    queue = f"parley-test-{new_session()}"
    sid = new_session()
    child = f"{sid}/planner-1"
    async with parley_worker(registry(), model, task_queue=queue) as conversations:
        turn = await conversations.send(sid, "alice", "plan Q3 and push main")
        assert sorted(c.tool_call_id for c in turn.pending) == ["p2", "sub-planner-1-c3"]
    # A new worker (no cached workflows): both conversations are replayed.
    async with parley_worker(registry(), model, task_queue=queue) as conversations:
        done = await conversations.decide(
            sid,
            "alice",
            [
                Decision(tool_call_id="p2", action="approve"),
                Decision(
                    tool_call_id="sub-planner-1-c3", action="reject", message="not this quarter"
                ),
            ],
        )
        assert done.status == "completed"
        assert done.reply == "Pushed main; the planner recorded nothing."
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main"]
        assert runs_in(child, "create_plan") == []
        parent = tool_messages((await conversations.state(sid, "alice")).transcript)
        assert parent["p1"].content == "The plan was rejected; nothing recorded."
        child_state = await conversations.state(child, "alice")
        answers = tool_messages(child_state.transcript)
        assert "not this quarter" in str(answers["sub-planner-1-c3"].content)
        assert child_state.status == "ended"


async def test_ending_the_parent_cancels_its_subagent(parley_worker) -> None:
    task = f"record a plan for Q3 ({new_session()})"
    async with parley_worker(registry(), planner_model(task)) as conversations:
        sid = new_session()
        child = f"{sid}/planner-1"
        turn = await conversations.send(sid, "alice", "get the Q3 plan done")
        assert [c.tool_call_id for c in turn.pending] == ["sub-planner-1-c3"]

        ended = await conversations.end(sid, "alice")
        assert ended.status == "ended"
        assert ended.pending == []
        answers = tool_messages(ended.transcript)
        assert "subagent planner was stopped" in str(answers["p1"].content)

        handle = conversations.handle(child)

        async def closed() -> WorkflowExecutionDescription | None:
            description = await handle.describe()
            return description if description.status != WorkflowExecutionStatus.RUNNING else None

        description = await eventually(closed, 60, "the subagent's workflow closed")
        assert description.status == WorkflowExecutionStatus.CANCELED
        assert runs_in(child, "create_plan") == []


class HeldTask(ByConversation):
    """``planner_model``'s scripts, with the subagent's first model call held until
    ``RELEASE`` is set (``HELD`` is set while it waits)."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        if not any(isinstance(m, HumanMessage) and m.id == "task" for m in messages):
            return super()._generate(messages, stop, run_manager, **kw)
        HELD.set()
        RELEASE.wait(120)
        return super()._generate(messages, stop, run_manager, **kw)


HELD, RELEASE = threading.Event(), threading.Event()


async def test_a_subagent_cancelled_during_its_model_call_ends_cancelled(parley_worker) -> None:
    """A cancel that reaches a run during an activity (an operator's, or the parent's
    close policy) ends it cancelled: the turn it interrupted does not swallow it and end
    the run "completed", nor keep it waiting for ever (``CANCEL_ENDS_THE_RUN``)."""
    task = f"record a plan for Q3 ({new_session()})"
    model = HeldTask(scripts=planner_model(task).scripts)
    HELD.clear()
    RELEASE.clear()
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        child = conversations.handle(f"{sid}/planner-1")
        sending = asyncio.create_task(conversations.send(sid, "alice", "get the Q3 plan done"))
        try:
            await eventually(HELD.is_set, 60, "the subagent's model call began")
            await child.cancel()

            async def closed() -> WorkflowExecutionDescription | None:
                description = await child.describe()
                return (
                    description if description.status != WorkflowExecutionStatus.RUNNING else None
                )

            description = await eventually(closed, 60, "the subagent's workflow closed")
        finally:
            RELEASE.set()
        assert description.status == WorkflowExecutionStatus.CANCELED
        turn = await sending
        assert turn.pending == []
        parent = await conversations.state(sid, "alice")
        answer = str(tool_messages(parent.transcript)["p1"].content)
        assert "subagent planner could not finish its task" in answer
        assert runs_in(f"{sid}/planner-1", "create_plan") == []


async def test_a_subagent_call_nobody_decides_on_expires_and_the_parent_goes_on(
    parley_worker,
) -> None:
    """The subagent keeps its own deadline; when its call expires it goes on, ends,
    and the parent's call is answered between the parent's turns."""
    task = f"record a plan for Q3 ({new_session()})"
    model = ByConversation(
        scripts={
            "get the Q3 plan done": script(
                {"tool_calls": [call("planner", "p1", task=task)]},
                {"content": "The planner could not record it."},
            ),
            task: script(
                {"tool_calls": [call("create_plan", "c3", title="Q3")]},
                {"content": "Nobody approved the plan; nothing was recorded."},
            ),
        }
    )
    async with parley_worker(registry(), model, pending_expiry_seconds=2) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "get the Q3 plan done")
        assert [c.tool_call_id for c in turn.pending] == ["sub-planner-1-c3"]

        async def at_rest() -> ConversationSnapshot | None:
            state = await conversations.state(sid, "alice")
            return state if state.status == "idle" else None

        state = await eventually(at_rest, 60, "the parent at rest after the expiry")
        assert state.pending == []
        assert state.last_turn is not None
        assert state.last_turn.reply == "The planner could not record it."
        answers = tool_messages(state.transcript)
        assert answers["p1"].content == "Nobody approved the plan; nothing was recorded."
        assert runs_in(f"{sid}/planner-1", "create_plan") == []


async def test_the_offline_model_hands_a_task_to_a_subagent(parley_worker) -> None:
    """``parley dev``'s scripted model: "ask the planner to ..." calls the subagent."""
    async with parley_worker(registry(), ScriptedChatModel()) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "ask the planner to list my plans")
        assert turn.status == "completed"
        assert turn.reply == 'planner answered: list_plans succeeded: ["Q2"]'
        assert len(runs_in(f"{sid}/planner-1", "list_plans")) == 1


async def test_the_worker_runs_only_the_subagents_tools() -> None:
    """Whatever the workflow's catalogue said, the worker refuses a tool the subagent
    may not use (before anything runs)."""
    request = RunToolInput(
        name="push_branch",
        args={"branch": "main"},
        tool_call_id="x1",
        user_id="alice",
        approved_by="alice",
        subagent="planner",
    )
    with pytest.raises(ApplicationError, match="subagent 'planner' may not use it"):
        await ToolActivities(registry()).run_tool(request)
    unknown = request.model_copy(update={"subagent": "nobody", "name": "create_plan"})
    with pytest.raises(ApplicationError, match="subagent 'nobody' may not use it"):
        await ToolActivities(registry()).run_tool(unknown)


def test_the_policy_file_defines_subagents(tmp_path: Path) -> None:
    file = tmp_path / "policies.toml"
    file.write_text(
        """
[[subagent]]
name = "planner"
description = "Plans"
tools = ["create_plan", "list_*"]
instructions = "You plan."

[[rule]]
name = "ask-before-planning"
tool = "planner"
decide = "confirm"
""",
        encoding="utf-8",
    )
    names = ["push_branch", "create_plan", "list_plans"]
    policies = load_policies(file, tool_names=names)
    (planner,) = policies.subagents
    assert planner.allows("list_plans") and not planner.allows("push_branch")
    assert [r.tool for r in policies.rules] == ["planner"]

    # `parley tools` shows the subagent as a tool, and the tools it may use.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PARLEY_TOOLS": "tests.support.policy_tools:planner_toolset",
        "PARLEY_POLICIES": str(file),
    }
    shown = subprocess.run([*PARLEY, "tools"], env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "planner  auto" in shown.stdout
    assert "subagent planner may use only: create_plan, list_plans" in shown.stdout
    assert "  ask-before-planning: planner -> confirm" in shown.stdout

    for text, problem in [
        ('[[subagent]]\nname = "p"\ndescription = "d"\ntools = ["git_*"]\n', "'git_*'"),
        (
            '[[subagent]]\nname = "create_plan"\ndescription = "d"\ntools = ["list_*"]\n',
            "name of a tool",
        ),
        ('[[subagent]]\nname = "p q"\ndescription = "d"\ntools = ["list_*"]\n', "subagent 'p q'"),
        ('[[subagent]]\nname = "p"\ndescription = "d"\ntools = []\n', "tools"),
        ("subagent = 3\n", "[[subagent]] table"),
    ]:
        file.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match="PARLEY_POLICIES") as error:
            load_policies(file, tool_names=names)
        assert problem in str(error.value)
