"""The undo window on the command line and the gateway: ``parley approve`` and
``parley chat`` print "c1 create_plan runs in N s … undo: parley undo …" as soon as the
call is scheduled, while its turn waits out the window; ``parley show`` lists the
scheduled call; ``parley undo`` inside the window runs nothing (the plans service's rows
stay empty) and an undo of a call that ran is refused in one line. ``POST
/v1/conversations/{id}/calls/{call_id}/undo``: the owner undoes, a stranger is refused
as for a conversation not theirs, a call not in a window is refused (422), and the state
JSON carries ``scheduled``. Real dev server, worker, gateway and plans service; the model
is a script."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import httpx
from temporalio.client import Client

from parley.activities.toolsets.plans import build_plans_toolset
from parley.cli.schedule import scheduled_line
from parley.client import Conversations
from parley.contracts import Decision, PolicyRule, ScheduledCall
from parley.tools import ToolRegistry
from tests.support import call, script
from tests.support.cli import assert_one_line_error, parley_against
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.plans import PLANS_KEY, rows
from tests.support.processes import PARLEY
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

USER = "maria"
TITLE = "Q4 roadmap"


def undo_registry(plans, undo_seconds: int = 600) -> ToolRegistry:
    rule = PolicyRule(
        name="plans-undoable", tool="create_plan", decide="confirm", undo_seconds=undo_seconds
    )
    return ToolRegistry(build_plans_toolset(plans.url, PLANS_KEY), rules=[rule])


def planning_model():
    return script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Understood."},
    )


def cli_env(conversations: Conversations, client: Client) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        "COLUMNS": "200",
    }


class Running:
    """A ``parley`` command in the background whose output lines are read as they come."""

    def __init__(self, env: dict[str, str], *args: str, stdin: str = "") -> None:
        self.process = subprocess.Popen(
            [*PARLEY, *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin is not None
        self.process.stdin.write(stdin)
        self.process.stdin.close()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    async def line_with(self, text: str) -> str:
        return await eventually(
            lambda: next((line for line in self.lines if text in line), None),
            what=f"a line with {text!r} from {self.process.args}",
        )

    async def finished(self) -> tuple[int, str, str]:
        code = await asyncio.to_thread(self.process.wait)
        await asyncio.to_thread(self._reader.join)
        assert self.process.stderr is not None
        return code, "\n".join(self.lines), self.process.stderr.read()


def test_the_line_says_when_it_runs_and_who_may_undo_it() -> None:
    now = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
    waiting = ScheduledCall(
        tool_call_id="c1",
        name="create_plan",
        runs_at=now + timedelta(seconds=24.2),
        approved_by="bob",
    )
    assert scheduled_line(waiting, "s 1", "maria", now, owner="maria") == (
        "c1 create_plan runs in 25 s (at 12:00:24 UTC) — undo: "
        "parley undo --session 's 1' --user maria --call c1"
    )
    assert scheduled_line(waiting, "s1", "carol", now, owner="maria").endswith(
        "— bob or maria may undo it"
    )
    assert scheduled_line(waiting, None, None, now).endswith("UTC), approved by bob")
    past = scheduled_line(waiting, "s1", "bob", now + timedelta(minutes=1))
    assert past.startswith("c1 create_plan runs in 0 s")
    undone = waiting.model_copy(update={"undone_by": "maria"})
    assert scheduled_line(undone, "s1", "bob", now) == (
        "c1 create_plan undone by maria: it will not run"
    )


async def test_approve_prints_the_window_show_lists_it_and_undo_takes_it_back(
    parley_worker, client: Client, plans
) -> None:
    async with parley_worker(undo_registry(plans), planning_model()) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "plan Q4")
        env = cli_env(conversations, client)
        approving = Running(env, "approve", "--session", sid, "--user", USER, "c1")
        # Printed while the decision's turn waits out the window: before any undo.
        line = await approving.line_with("runs in")
        assert line.startswith("c1 create_plan runs in ") and " UTC) — undo: " in line
        assert line.endswith(f"parley undo --session {sid} --user {USER} --call c1")
        assert approving.process.poll() is None

        shown = await parley_against(conversations, client, "show", "-s", sid, "-u", USER)
        assert shown.returncode == 0, shown.stderr
        assert "Approved, in their undo window:" in shown.stdout
        assert "c1 create_plan runs in " in shown.stdout
        assert f"undo: parley undo --session {sid} --user {USER} --call c1" in shown.stdout

        undone = await parley_against(
            conversations, client, "undo", "--session", sid, "--user", USER, "--call", "c1"
        )
        assert undone.returncode == 0, undone.stderr
        assert undone.stdout.strip() == "undone: c1 create_plan will not run (the model is told)"
        code, output, errors = await approving.finished()
        assert code == 0, errors
        assert "rejected create_plan (c1)" in output and "undid this call" in output
        assert "Understood." in output
        assert rows(plans, USER) == []

        again = await parley_against(
            conversations, client, "undo", "--session", sid, "--user", USER, "--call", "c1"
        )
        assert_one_line_error(again, "c1 is not in an undo window")
        later = await parley_against(conversations, client, "show", "-s", sid, "-u", USER)
        assert "Approved, in their undo window:" not in later.stdout


async def test_chat_prints_the_window_while_its_turn_waits(
    parley_worker, client: Client, plans
) -> None:
    async with parley_worker(undo_registry(plans), planning_model()) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "plan Q4")
        env = cli_env(conversations, client)
        chatting = Running(env, "chat", "--session", sid, "--user", USER, stdin="a\n/quit\n")
        line = await chatting.line_with("runs in")
        assert f"undo: parley undo --session {sid} --user {USER} --call c1" in line
        assert (await conversations.undo(sid, USER, ["c1"])).undone == ["c1"]
        code, output, errors = await chatting.finished()
        assert code == 0, errors
        assert "undid this call" in output and "Understood." in output
        assert rows(plans, USER) == []


async def test_undo_of_a_call_that_ran_is_refused_in_one_line(
    parley_worker, client: Client, plans
) -> None:
    async with parley_worker(undo_registry(plans, 1), planning_model()) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "plan Q4")
        approved = await parley_against(
            conversations, client, "approve", "--session", sid, "--user", USER, "c1"
        )
        assert approved.returncode == 0, approved.stderr
        assert "success create_plan (c1)" in approved.stdout
        assert [r["title"] for r in rows(plans, USER)] == [TITLE]
        refused = await parley_against(
            conversations, client, "undo", "--session", sid, "--user", USER, "--call", "c1"
        )
        assert_one_line_error(refused, "c1 is not in an undo window: it ran")
        nothing = await parley_against(conversations, client, "undo", "-s", sid, "-u", USER)
        assert_one_line_error(nothing, "nothing to undo")


async def test_the_gateway_undoes_for_the_owner_and_refuses_others(parley_worker, plans) -> None:
    async with (
        parley_worker(undo_registry(plans), planning_model()) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        await conversations.send(sid, "alice", "plan Q4")
        approve = [Decision(tool_call_id="c1", action="approve")]
        deciding = asyncio.create_task(conversations.decide(sid, "alice", approve))

        async def scheduled() -> list[dict]:
            view = await http.get(f"/v1/conversations/{sid}", headers=auth(ALICE_TOKEN))
            return view.json().get("scheduled") or []

        [waiting] = await eventually(scheduled, what="the state JSON carries the scheduled call")
        assert (waiting["tool_call_id"], waiting["name"]) == ("c1", "create_plan")
        assert waiting["approved_by"] == "alice" and waiting["runs_at"]

        path = f"/v1/conversations/{sid}/calls/c1/undo"
        stranger = await http.post(path, headers=auth(BOB_TOKEN))
        assert stranger.status_code == 404, stranger.text
        assert stranger.json()["error"]["type"] == "NotFound"
        unknown = await http.post(
            f"/v1/conversations/{sid}/calls/nope/undo", headers=auth(ALICE_TOKEN)
        )
        assert unknown.status_code == 422, unknown.text
        assert "nope is not in an undo window" in unknown.json()["error"]["message"]
        assert not deciding.done() and rows(plans, "alice") == []

        undone = await http.post(path, headers=auth(ALICE_TOKEN))
        assert undone.status_code == 200, undone.text
        assert undone.json() == {"undone": ["c1"]}
        done = await deciding
        assert done.results[0].status == "rejected" and "undid this call" in done.results[0].content
        assert rows(plans, "alice") == []

        late = await http.post(path, headers=auth(ALICE_TOKEN))
        assert (
            late.status_code == 422 and "not in an undo window" in late.json()["error"]["message"]
        )
        spec = (await http.get("/openapi.json")).json()
        operation = spec["paths"]["/v1/conversations/{session_id}/calls/{call_id}/undo"]["post"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/UndoResult"
        }
