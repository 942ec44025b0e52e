"""Approval policies as data: per-tool and per-argument rules from the policy file, and
decisions remembered for the rest of a conversation. Real worker, real dev server; the
rules travel in the worker's catalogue and are evaluated in the workflow, and again by
the worker before it runs a ``confirm`` tool a rule made ``auto``."""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from parley.activities.tool_calls import ToolActivities
from parley.client import ConversationRefused
from parley.contracts import Decision, PolicyRule, RunToolInput
from parley.tools import ToolRegistry, confirm
from parley.tools.policies import load_policies
from tests.support import call, script
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.policy_tools import create_plan, push_branch
from tests.support.processes import PARLEY, ROOT
from tests.support.transcripts import new_session, runs_in, tool_messages

TODAY = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[datetime.now(UTC).weekday()]


RULES = [
    PolicyRule(name="push-feature", tool="push_branch", args={"branch": "feat/*"}, decide="auto"),
    PolicyRule(name="push-protected", tool="push_branch", decide="confirm"),
    # Matches whenever the test runs: a deny by the calendar.
    PolicyRule(name="plans-frozen-today", tool="create_plan", days=TODAY, decide="deny"),
]


def registry(rules: list[PolicyRule] = RULES) -> ToolRegistry:
    return ToolRegistry([confirm(push_branch), confirm(create_plan)], rules=rules)


async def test_a_per_argument_rule_runs_one_call_and_gates_another(parley_worker) -> None:
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("push_branch", "p1", branch="feat/login"),
                call("push_branch", "p2", branch="main"),
                call("create_plan", "p3", title="Q4"),
            ],
        },
        {"content": "Pushed main too."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "push both, plan Q4")
        # feat/login ran at once (rule push-feature), on a confirm tool: the worker
        # re-evaluated the rule and agreed.
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["feat/login"]
        (pending,) = turn.pending
        assert pending.tool_call_id == "p2"
        assert pending.reason == "confirm because rule `push-protected` matched"
        by_id = {r.tool_call_id: r for r in turn.results}
        assert by_id["p1"].status == "success"
        assert by_id["p3"].status == "error"
        assert "rule `plans-frozen-today`" in (by_id["p3"].content or "")
        assert runs_in(sid, "create_plan") == []

        state = await conversations.state(sid, "alice")
        policy = {e.tool_call_id: e.detail for e in state.audit if e.event == "policy"}
        assert policy == {
            "p1": {"policy": "auto", "rule": "push-feature"},
            "p2": {"policy": "confirm", "rule": "push-protected"},
            "p3": {"policy": "deny", "rule": "plans-frozen-today"},
        }
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="p2", action="approve")]
        )
        assert done.reply == "Pushed main too."
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["feat/login", "main"]
        tool_messages((await conversations.state(sid, "alice")).transcript)


def test_the_worker_runs_a_rule_made_auto_call_only_if_its_own_rules_agree() -> None:
    """A workflow's catalogue may come from a worker with other rules (another deploy):
    a ``confirm`` tool runs without a decision only if this worker's rules, with the
    workflow's inputs, make it ``auto`` by the same rule."""
    request = RunToolInput(
        name="push_branch",
        args={"branch": "feat/x"},
        tool_call_id="q1",
        user_id="alice",
        rule="push-feature",
        evaluated_at=datetime.now(UTC),
    )
    assert ToolActivities(registry())._rule_made_auto(request)
    assert not ToolActivities(registry(rules=[]))._rule_made_auto(request)
    assert not ToolActivities(registry())._rule_made_auto(
        request.model_copy(update={"args": {"branch": "main"}})
    )
    assert not ToolActivities(registry())._rule_made_auto(
        request.model_copy(update={"rule": "push-protected"})
    )


async def test_remember_applies_to_the_same_call_and_not_to_a_different_one(
    parley_worker,
) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "r1", branch="main")]},
        {"content": "Pushed."},
        {"content": "", "tool_calls": [call("push_branch", "r2", branch="main")]},
        {"content": "Pushed again, as you said to remember."},
        {"content": "", "tool_calls": [call("push_branch", "r3", branch="release")]},
        {"content": "Not pushed."},
        {"content": "", "tool_calls": [call("push_branch", "r4", branch="release")]},
        {"content": "Refused, as you said."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "push main")
        assert [p.tool_call_id for p in turn.pending] == ["r1"]
        await conversations.decide(
            sid, "alice", [Decision(tool_call_id="r1", action="approve", remember=True)]
        )
        again = await conversations.send(sid, "alice", "push main again")
        assert again.status == "completed" and again.pending == []
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main", "main"]

        different = await conversations.send(sid, "alice", "push release")
        assert [p.tool_call_id for p in different.pending] == ["r3"]  # another shape: asks
        await conversations.decide(
            sid,
            "alice",
            [Decision(tool_call_id="r3", action="reject", message="no", remember=True)],
        )
        refused = await conversations.send(sid, "alice", "push release now")
        assert refused.pending == [] and refused.results[0].status == "error"
        assert "remembered" in (refused.results[0].content or "")
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main", "main"]

        state = await conversations.state(sid, "alice")
        remembered = [(e.tool_call_id, e.detail) for e in state.audit if e.event == "remembered"]
        assert remembered == [("r1", {"policy": "auto"}), ("r3", {"policy": "deny"})]
        (auto_decided,) = [
            e for e in state.audit if e.event == "decided" and e.tool_call_id == "r2"
        ]
        assert auto_decided.actor == "alice"
        assert auto_decided.detail == {"action": "approve", "remembered_from": "r1"}


async def test_an_edit_cannot_be_remembered(parley_worker) -> None:
    model = script({"content": "", "tool_calls": [call("push_branch", "e1", branch="main")]})
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "push main")
        with pytest.raises(ConversationRefused, match="only approve and reject can be remembered"):
            await conversations.decide(
                sid,
                "alice",
                [Decision(tool_call_id="e1", action="edit", args={"branch": "dev"}, remember=True)],
            )
        assert runs_in(sid, "push_branch") == []


def test_the_policy_file_is_checked_at_load(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        '[[rule]]\nname = "push-feature"\ntool = "push_branch"\n'
        'args = { branch = "feat/*" }\ndecide = "auto"\n'
    )
    (rule,) = load_policies(good, tool_names=["push_branch"]).rules
    assert rule.args == {"branch": "feat/*"}
    cases = {
        '[[rule]]\nname = "x"\ntool = "nothing_here"\ndecide = "auto"\n': "matches no tool",
        '[[rule]]\nname = "x"\ntool = "push_branch"\ndecide = "maybe"\n': "decide",
        '[[rule]]\nname = "x"\ntool = "push_branch"\nhours = "9-5"\ndecide = "deny"\n': "HH:MM",
        '[[rule]]\nname = "x"\ntool = "push_branch"\noutside = true\ndecide = "deny"\n': (
            "needs 'hours' or 'days'"
        ),
        '[rules]\nname = "x"\n': "[[rule]]",
        "not toml [": "is not TOML",
    }
    for number, (text, expected) in enumerate(cases.items()):
        bad = tmp_path / f"bad{number}.toml"
        bad.write_text(text)
        with pytest.raises(ValueError, match="PARLEY_POLICIES") as err:
            load_policies(bad, tool_names=["push_branch"])
        assert expected in str(err.value), str(err.value)


def test_parley_tools_shows_policies_and_rules_in_order(tmp_path: Path) -> None:
    policies = tmp_path / "policies.toml"
    policies.write_text(
        '[[rule]]\nname = "push-feature"\ntool = "push_branch"\n'
        'args = { branch = "feat/*" }\ndecide = "auto"\n\n'
        '[[rule]]\nname = "plans-after-hours"\ntool = "create_plan"\nhours = "09:00-18:00"\n'
        'days = "mon-fri"\nutc_offset = "+01:00"\noutside = true\ndecide = "deny"\n'
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PARLEY_TOOLS": "tests.support.policy_tools:toolset",
        "PARLEY_POLICIES": str(policies),
    }
    shown = subprocess.run([*PARLEY, "tools"], env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "push_branch  confirm" in shown.stdout
    lines = shown.stdout.splitlines()
    assert lines[-2:] == [
        "  push-feature: push_branch when branch=feat/* -> auto",
        "  plans-after-hours: create_plan when outside mon-fri 09:00-18:00 UTC+01:00 -> deny",
    ]
    policies.write_text('[[rule]]\nname = "x"\ntool = "git_*"\ndecide = "auto"\n')
    refused = subprocess.run([*PARLEY, "tools"], env=env, capture_output=True, text=True)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "rule 'x': tool: 'git_*' matches no tool on this worker" in refused.stderr


async def test_approve_all_matching_with_remember_from_the_cli(parley_worker, client) -> None:
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("push_branch", "m1", branch="main"),
                call("push_branch", "m2", branch="release"),
            ],
        },
        {"content": "Both pushed."},
        {"content": "", "tool_calls": [call("push_branch", "m3", branch="main")]},
        {"content": "Pushed main again."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "push main and release")
        assert [p.tool_call_id for p in turn.pending] == ["m1", "m2"]
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        }
        base = [*PARLEY, "approve", "--session", sid, "--user", "alice"]
        wrong = await asyncio.to_thread(
            subprocess.run, [*base, "--all-matching", "create_*"], env=env,
            capture_output=True, text=True,
        )  # fmt: skip
        assert wrong.returncode == 1 and "no pending call" in wrong.stderr
        approved = await asyncio.to_thread(
            subprocess.run, [*base, "--all-matching", "push_*", "--remember"], env=env,
            capture_output=True, text=True,
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "Both pushed." in approved.stdout
        again = await conversations.send(sid, "alice", "push main again")
        assert again.status == "completed"
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main", "release", "main"]


SECOND_PAIR = PolicyRule(
    name="second-pair-of-eyes",
    tool="push_branch",
    args={"branch": "main"},
    decide="confirm",
    requires_reviewer=True,
)


async def test_a_reviewer_rule_refuses_the_owners_approve_and_takes_the_reviewers(
    parley_worker,
) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "v1", branch="main")]},
        {"content": "Pushed after review."},
    )
    async with parley_worker(registry(rules=[SECOND_PAIR]), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "push main", reviewers=["bob"])
        (pending,) = turn.pending
        assert pending.reviewer_rule == "second-pair-of-eyes"
        approve = [Decision(tool_call_id="v1", action="approve")]
        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(sid, "alice", approve)
        assert "rule `second-pair-of-eyes` requires a reviewer" in refused.value.message
        assert "bob" not in refused.value.message  # the rule, not the people
        with pytest.raises(ConversationRefused):  # a stranger is no reviewer
            await conversations.decide(sid, "mallory", approve)
        assert runs_in(sid, "push_branch") == []

        # the reviewer reads the conversation, finds it in their list, and approves
        seen = await conversations.state(sid, "bob")
        assert [c.tool_call_id for c in seen.pending] == ["v1"]
        reviewing = await conversations.list("bob", reviewing=True)
        assert (sid, "awaiting_approval") in [(c.session_id, c.status) for c in reviewing]
        assert sid not in [c.session_id for c in await conversations.list("bob")]  # not bob's
        done = await conversations.decide(sid, "bob", approve)
        assert done.reply == "Pushed after review."
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main"]
        state = await conversations.state(sid, "alice")
        (decided,) = [e for e in state.audit if e.event == "decided" and "action" in e.detail]
        assert decided.actor == "bob"
        # only the owner sends messages
        with pytest.raises(ConversationRefused):
            await conversations.send(sid, "bob", "push it again")


async def test_the_owner_may_still_reject_a_call_that_needs_a_reviewer(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "v2", branch="main")]},
        {"content": "Not pushed."},
    )
    async with parley_worker(registry(rules=[SECOND_PAIR]), model) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "push main", reviewers=["bob"])
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="v2", action="reject", message="changed my mind")]
        )
        assert done.reply == "Not pushed."
        assert runs_in(sid, "push_branch") == []


async def test_a_reviewer_decides_through_the_gateway(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "g1", branch="main")]},
        {"content": "Pushed after review."},
    )
    async with (
        parley_worker(registry(rules=[SECOND_PAIR]), model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        started = await http.post(
            f"/v1/conversations/{sid}/messages",
            json={"text": "push main", "reviewers": ["bob"]},
            headers=auth(ALICE_TOKEN),
        )
        assert started.json()["status"] == "awaiting_approval", started.text
        bad = await http.post(
            f"/v1/conversations/{new_session()}/messages",
            json={"text": "hi", "reviewers": ["not a user"]},
            headers=auth(ALICE_TOKEN),
        )
        assert bad.status_code == 422 and "error" in bad.json()
        listed = await http.get("/v1/conversations?reviewing=true", headers=auth(BOB_TOKEN))
        assert sid in [c["session_id"] for c in listed.json()["conversations"]]
        decision = {"decisions": [{"tool_call_id": "g1", "action": "approve"}]}
        refused = await http.post(
            f"/v1/conversations/{sid}/decisions", json=decision, headers=auth(ALICE_TOKEN)
        )
        assert refused.status_code == 422 and "second-pair-of-eyes" in refused.text
        done = await http.post(
            f"/v1/conversations/{sid}/decisions", json=decision, headers=auth(BOB_TOKEN)
        )
        assert done.json()["reply"] == "Pushed after review.", done.text
