"""Taking calls back from ``parley chat``, on a pseudo-terminal against a real dev
server, worker and plans service; the model is a script.

- ``/revert`` lists the calls that ran and may be reverted, with their message numbers;
  ``/revert N`` proposes the inverse (``delete_plan``), which chat asks for like any
  pending call, with its preview; approving it removes the plan's row.
- A revert that cannot be is one line and chat goes on: a call reverted already, a tool
  with no inverse, an unknown id, a number that names no call, and a run that changed
  nothing (the service created no plan).
- ``/undo`` typed while chat waits out a call's undo window takes it back: the plans
  service never sees the create, and the model is told; ``/undo`` with nothing in a
  window is one line. ``/help`` lists both commands.
"""

from __future__ import annotations

import asyncio
import os
import re

from temporalio.client import Client

from parley.activities.toolsets.plans import build_plans_toolset
from parley.cli.chat import ASK_DECISION
from parley.client import Conversations
from parley.contracts import PolicyRule
from parley.tools import ToolRegistry
from tests.support import call, script
from tests.support.plans import PLANS_KEY, inject_faults, plans_registry, rows, seen_requests
from tests.support.processes import PARLEY
from tests.support.terminal import Terminal
from tests.support.transcripts import new_session

USER = "maria"
TITLE = "Q4 roadmap"
#: The scripted model answers by the count of assistant messages, and a revert's
#: proposal is one (Parley's own): this entry stands for it and is never asked for.
PARLEY_PROPOSES = {"content": "(Parley proposes the inverse)"}


def cli_env(conversations: Conversations, client: Client) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
    }


def planning_model():
    return script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Created."},
        PARLEY_PROPOSES,
        {"content": "Deleted it again."},
    )


async def typed(chat: Terminal, line: str, until: str = "you> ") -> str:
    """Type ``line`` and Enter; what chat printed after its echo, up to ``until``."""
    chat.type(line + "\n")
    shown = await asyncio.to_thread(chat.expect, until)
    echo = line + "\n"
    return shown[len(echo) :] if shown.startswith(echo) else shown


def one_line(shown: str) -> str:
    lines = [line for line in shown.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    return lines[0]


async def test_revert_in_chat_proposes_the_inverse_and_its_approval_removes_the_row(
    parley_worker, client: Client, plans
) -> None:
    async with parley_worker(plans_registry(plans), planning_model()) as conversations:
        sid = new_session()
        chat = Terminal([*PARLEY, "chat", "-s", sid, "-u", USER], cli_env(conversations, client))
        try:
            await asyncio.to_thread(chat.expect, "you> ")
            await typed(chat, "plan Q4", ASK_DECISION)
            ran = await typed(chat, "a")
            assert "success create_plan (c1)" in ran and "Created." in ran
            assert [r["title"] for r in rows(plans, USER)] == [TITLE]

            listed = await typed(chat, "/revert")
            assert "Calls you can revert (/revert NUMBER or /revert CALL_ID):" in listed
            [number] = re.findall(r"^\s+(\d+)\s+create_plan \(c1\)$", listed, re.M)
            # The number is the one /show gives the call's result.
            shown = await typed(chat, "/show")
            assert re.search(rf"^\s*{number}\s+tool create_plan \(c1\) success", shown, re.M)

            asked = await typed(chat, f"/revert {number}", ASK_DECISION)
            assert "Waiting for your decision:" in asked
            assert "delete_plan (revert-c1)" in asked and "deletes: yes" in asked
            assert [r["title"] for r in rows(plans, USER)] == [TITLE]  # gated: nothing yet
            deleted = await typed(chat, "a")
            assert "success delete_plan (revert-c1)" in deleted
            assert "Deleted it again." in deleted
            assert rows(plans, USER) == []

            again = one_line(await typed(chat, "/revert c1"))
            assert again.startswith("refused: c1 was already reverted")
            inverse = one_line(await typed(chat, "/revert revert-c1"))
            assert inverse == (
                "refused: revert-c1 cannot be reverted: delete_plan declares no inverse"
            )
            unknown = one_line(await typed(chat, "/revert nope"))
            assert unknown.startswith("refused: nope did not run successfully")
            assert "nothing to revert" in unknown
            first = one_line(await typed(chat, "/revert 1"))
            assert (
                first
                == "message 1 is not a tool call's result: /revert lists the calls you can revert"
            )
            beyond = one_line(await typed(chat, "/revert 99"))
            assert beyond.startswith("message 99 is not in this conversation")
            nothing = await typed(chat, "/revert")
            assert one_line(nothing).startswith("nothing to revert:")

            helped = await typed(chat, "/help")
            assert re.search(r"^\s+/revert N\|ID\s+propose the inverse", helped, re.M)
            assert re.search(r"^\s+/undo \[ID\]\s+take back approved calls", helped, re.M)
            chat.type("/quit\n")
            assert await asyncio.to_thread(chat.wait) == 0
            assert "Traceback" not in chat.output
        finally:
            chat.close()


async def test_a_revert_of_a_run_that_changed_nothing_is_one_line(
    parley_worker, client: Client, plans
) -> None:
    # The service answers the create without making a plan (no id): nothing to take back.
    inject_faults(plans, {"status": 201, "body": {"title": TITLE}, "method": "POST"})
    async with parley_worker(plans_registry(plans), planning_model()) as conversations:
        sid = new_session()
        chat = Terminal([*PARLEY, "chat", "-s", sid, "-u", USER], cli_env(conversations, client))
        try:
            await asyncio.to_thread(chat.expect, "you> ")
            await typed(chat, "plan Q4", ASK_DECISION)
            assert "success create_plan (c1)" in await typed(chat, "a")
            assert rows(plans, USER) == []
            refused = one_line(await typed(chat, "/revert c1"))
            assert refused == (
                "refused: c1 cannot be reverted: that run changed nothing to take back"
            )
            chat.type("/quit\n")
            assert await asyncio.to_thread(chat.wait) == 0
        finally:
            chat.close()


async def test_undo_typed_while_chat_waits_out_the_window_runs_nothing(
    parley_worker, client: Client, plans
) -> None:
    rule = PolicyRule(name="plans-undoable", tool="create_plan", decide="confirm", undo_seconds=600)
    registry = ToolRegistry(build_plans_toolset(plans.url, PLANS_KEY), rules=[rule])
    model = script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Understood."},
    )
    async with parley_worker(registry, model) as conversations:
        sid = new_session()
        chat = Terminal([*PARLEY, "chat", "-s", sid, "-u", USER], cli_env(conversations, client))
        try:
            await asyncio.to_thread(chat.expect, "you> ")
            await typed(chat, "plan Q4", ASK_DECISION)
            waiting = await typed(chat, "a", "(type /undo here to take it back before it runs)")
            assert "c1 create_plan runs in " in waiting
            # The decision's turn waits out the window: chat reads the line meanwhile.
            undone = await typed(chat, "/undo", "will not run (the model is told)")
            assert "undone: c1 create_plan" in undone
            turn = await asyncio.to_thread(chat.expect, "you> ")
            assert "rejected create_plan (c1)" in turn and "undid this call" in turn
            assert "Understood." in turn
            assert rows(plans, USER) == []
            assert not [r for r in seen_requests(plans) if r["method"] == "POST"]
            nothing = one_line(await typed(chat, "/undo"))
            assert nothing.startswith("refused: nothing to undo")
            chat.type("/quit\n")
            assert await asyncio.to_thread(chat.wait) == 0
            assert "Traceback" not in chat.output
        finally:
            chat.close()
