"""The tools of the policy and subagent tests: ``push_branch`` and ``create_plan``
(confirm tools that record their runs in ``RUNS``), ``list_plans`` (a read), the
``planner`` subagent and its scripted model. Loaded by the test's worker, or by a
``parley tools`` process through ``PARLEY_TOOLS=tests.support.policy_tools:toolset``
(or ``:planner_toolset``)."""

from __future__ import annotations

from typing import Annotated

from langchain_core.tools import InjectedToolArg, tool

from parley.contracts import SubagentSpec, ToolContext
from parley.tools import ToolRegistry, auto, confirm
from tests.support.recording_tools import RUNS
from tests.support.scripts import ByConversation, call, script


@tool
async def push_branch(branch: str, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Push a git branch (changes the world)."""
    RUNS.append({"tool": "push_branch", "key": context.idempotency_key, "branch": branch})
    return {"pushed": branch}


@tool
async def create_plan(title: str, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Create a plan (changes the world)."""
    RUNS.append({"tool": "create_plan", "key": context.idempotency_key, "title": title})
    return {"created": title}


@tool
async def list_plans(context: Annotated[ToolContext, InjectedToolArg]) -> list[str]:
    """List the plans (reads only)."""
    RUNS.append({"tool": "list_plans", "key": context.idempotency_key})
    return ["Q2"]


def toolset() -> list:
    """The policy tests' tools, for `parley tools` and worker processes (PARLEY_TOOLS)."""
    return [confirm(push_branch), confirm(create_plan)]


PLANNER = SubagentSpec(
    name="planner",
    description="Works out and records plans; it cannot touch git.",
    tools=["create_plan", "list_*"],
    instructions="You plan work. Record each plan with create_plan.",
)


def planner_toolset() -> list:
    """The subagent tests' tools, for `parley tools` (PARLEY_TOOLS)."""
    return [confirm(push_branch), confirm(create_plan), auto(list_plans)]


def planner_registry() -> ToolRegistry:
    return ToolRegistry(
        [confirm(push_branch), confirm(create_plan), auto(list_plans)], subagents=[PLANNER]
    )


def planner_model(task: str, parent_reply: str = "The planner is done.") -> ByConversation:
    """The parent hands ``task`` to the planner, whose script proposes a call it may
    not make (``push_branch``), a read and a confirm call."""
    return ByConversation(
        scripts={
            "get the Q3 plan done": script(
                {"tool_calls": [call("planner", "p1", task=task)]},
                {"content": parent_reply},
            ),
            task: script(
                {
                    "tool_calls": [
                        call("push_branch", "c1", branch="main"),  # not the planner's
                        call("list_plans", "c2"),
                        call("create_plan", "c3", title="Q3"),
                    ]
                },
                {"content": "Plan Q3 recorded."},
            ),
        }
    )
