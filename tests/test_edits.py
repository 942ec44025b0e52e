"""An edit is a new proposal: edited arguments are put in canonical form and go through
the same rules. A ``deny`` refuses the edit, naming the rule; a rule that needs a
reviewer leaves the call waiting for one; the audit and the result say who edited.
Through the real CLI and the real gateway, a real worker and dev server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import httpx
from langchain_core.tools import InjectedToolArg, tool

from parley.contracts import PolicyRule, ToolContext, args_hash
from parley.tools import ParleyTool, ToolRegistry
from tests.support import RUNS, call, script
from tests.support.cli import parley_against
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.transcripts import new_session, runs_in

PARLEY = [str(Path(sys.executable).parent / "parley")]


@tool
async def deploy(target: str, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Deploy to a target (changes the world)."""
    RUNS.append({"tool": "deploy", "key": context.idempotency_key, "target": target})
    return {"deployed": target}


def canonical_target(args: dict) -> dict:
    return {**args, "target": args["target"].strip().lower()}


RULES = [
    PolicyRule(name="no-secret-targets", tool="deploy", args={"target": "secret-*"}, decide="deny"),
    PolicyRule(
        name="prod-needs-review",
        tool="deploy",
        args={"target": "prod-*"},
        decide="confirm",
        requires_reviewer=True,
    ),
]


def registry() -> ToolRegistry:
    return ToolRegistry([ParleyTool(deploy, prepare=canonical_target)], rules=RULES)


def model(call_id: str):
    return script(
        {"content": "", "tool_calls": [call("deploy", call_id, target="staging")]},
        {"content": "Deployed."},
    )


async def test_edits_through_the_cli_are_judged_by_the_rules(parley_worker, client) -> None:
    async with parley_worker(registry(), model("e1")) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "deploy", reviewers=["bob"])
        assert [p.tool_call_id for p in turn.pending] == ["e1"]
        base = ["edit", "--session", sid, "--user", "alice", "e1", "--args"]

        # An edit into deny is refused, naming the rule; nothing runs, the call waits.
        denied = await parley_against(
            conversations, client, *base, json.dumps({"target": " SECRET-x"})
        )
        assert denied.returncode == 1
        assert "no-secret-targets" in denied.stderr and len(denied.stderr.splitlines()) == 1
        assert runs_in(sid, "deploy") == []
        state = await conversations.state(sid, "alice")
        assert [(p.tool_call_id, p.args) for p in state.pending] == [("e1", {"target": "staging"})]

        # The owner's edit into a reviewer rule waits for a reviewer, canonical.
        waits = await parley_against(
            conversations, client, *base, json.dumps({"target": "PROD-eu "})
        )
        assert waits.returncode == 0, waits.stderr
        state = await conversations.state(sid, "alice")
        [pending] = state.pending
        assert pending.args == {"target": "prod-eu"}
        assert pending.args_hash == args_hash({"target": "prod-eu"})
        assert pending.reviewer_rule == "prod-needs-review" and pending.edited_by == "alice"
        assert runs_in(sid, "deploy") == []

        # The reviewer approves: it runs once, with the edited arguments.
        approved = await parley_against(
            conversations, client, "approve", "--session", sid, "--user", "bob"
        )
        assert approved.returncode == 0, approved.stderr
        assert [r["target"] for r in runs_in(sid, "deploy")] == ["prod-eu"]
        state = await conversations.state(sid, "alice")
        decided = [a for a in state.audit if a.event == "decided"]
        assert [(a.actor, a.detail["action"]) for a in decided] == [
            ("alice", "edit"),
            ("bob", "approve"),
        ]
        assert decided[-1].detail["args_hash"] == args_hash({"target": "prod-eu"})

        # Both edits were made canonical by local activities: markers, no activity task.
        history = await conversations.handle(sid).fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert "parley.canonical_args" not in scheduled
        local = [
            e.marker_recorded_event_attributes
            for e in history.events
            if e.HasField("marker_recorded_event_attributes")
            and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ]
        assert len(local) == 2


async def test_edits_through_the_gateway_are_judged_by_the_rules(parley_worker) -> None:
    async with (
        parley_worker(registry(), model("g1")) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        started = await http.post(
            f"/v1/conversations/{sid}/messages",
            json={"text": "deploy", "reviewers": ["bob"]},
            headers=auth(ALICE_TOKEN),
        )
        assert started.json()["status"] == "awaiting_approval", started.text
        url = f"/v1/conversations/{sid}/decisions"

        def edit(target: str) -> dict:
            decision = {"tool_call_id": "g1", "action": "edit", "args": {"target": target}}
            return {"decisions": [decision]}

        denied = await http.post(url, json=edit("secret-1"), headers=auth(ALICE_TOKEN))
        assert denied.status_code == 422, denied.text
        assert "no-secret-targets" in denied.json()["error"]["message"]
        waits = await http.post(url, json=edit("prod-us"), headers=auth(ALICE_TOKEN))
        assert waits.json()["status"] == "awaiting_approval", waits.text
        [pending] = waits.json()["pending"]
        assert pending["args"] == {"target": "prod-us"} and pending["edited_by"] == "alice"
        assert runs_in(sid, "deploy") == []
        # The owner may not approve it; the reviewer may, and it runs once.
        approve = {"decisions": [{"tool_call_id": "g1", "action": "approve"}]}
        refused = await http.post(url, json=approve, headers=auth(ALICE_TOKEN))
        assert refused.status_code == 422 and "prod-needs-review" in refused.text
        done = await http.post(url, json=approve, headers=auth(BOB_TOKEN))
        assert done.json()["status"] == "completed", done.text
        [result] = done.json()["results"]
        assert "alice, the owner, changed the arguments" in result["content"]
        assert [r["target"] for r in runs_in(sid, "deploy")] == ["prod-us"]
