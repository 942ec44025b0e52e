"""Quorum approvals: a rule may require ``approvals = 2``, M of the conversation's
reviewers, the requester never counting. Against a real dev server and worker, through
the client, the gateway and the ``parley`` CLI:

- one reviewer's approve leaves the call waiting, "1 of 2 approvals: bob" on every
  surface (the gateway's JSON, the AG-UI interrupt, ``parley show``); the same reviewer
  cannot count twice; the owner cannot approve at all; a second reviewer's approve runs
  it once, with the arguments both approved;
- a rejection answers the call and its approvals go with it: the model's next proposal
  of the very same call starts from 0; an edit is a new proposal, counted again;
- the worker refuses to run a quorum call with fewer approvers, whatever it is told;
- ``parley show`` says who the call waits for, and hints a decision
  only to those whose approve would be taken; deciding a decided call again says "q1
  already decided by carol at …: approved" (the same command: exit 0; another decision:
  refused, by the CLI and the gateway).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import UTC, datetime

import httpx
import pytest
from rich.console import Console
from temporalio.exceptions import ApplicationError

from parley.activities.tool_calls import ToolActivities
from parley.cli.rendering import print_pending
from parley.client import ConversationRefused
from parley.contracts import SPEND_CALL, Awaiting, Decision, PendingCall, PolicyRule, RunToolInput
from parley.tools import ToolRegistry, confirm
from parley.tools.policies import load_policies
from tests.support import call, script
from tests.support.gateway import BOB_TOKEN, auth, serve_gateway
from tests.support.policy_tools import push_branch
from tests.support.processes import PARLEY
from tests.support.transcripts import new_session, runs_in

TWO_OF_THEM = PolicyRule(
    name="two-reviewers-for-main",
    tool="push_branch",
    args={"branch": "main"},
    decide="confirm",
    approvals=2,
)
REVIEWERS = ["bob", "carol", "dave"]


def registry() -> ToolRegistry:
    return ToolRegistry([confirm(push_branch)], rules=[TWO_OF_THEM])


def approve(call: PendingCall) -> list[Decision]:
    """An approval of the arguments as shown, as every surface sends it."""
    return [Decision(tool_call_id=call.tool_call_id, action="approve", args_hash=call.args_hash)]


async def test_two_reviewers_are_needed_and_the_requester_never_counts(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "q1", branch="main")]},
        {"content": "Pushed after two reviews."},
    )
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        turn = await conversations.send(sid, "alice", "push main", reviewers=REVIEWERS)
        (pending,) = turn.pending
        assert pending.approvals_needed == 2 and pending.approvals == []
        with pytest.raises(ConversationRefused) as refused:  # the requester never counts
            await conversations.decide(sid, "alice", approve(pending))
        assert "requires a reviewer other than the requester" in refused.value.message

        first = await conversations.decide(sid, "bob", approve(pending))
        assert first.status == "awaiting_approval" and runs_in(sid, "push_branch") == []
        (waiting,) = first.pending
        assert [a.by for a in waiting.approvals] == ["bob"]
        with pytest.raises(ConversationRefused) as twice:  # nobody counts twice
            await conversations.decide(sid, "bob", approve(waiting), update_id="bob-again")
        assert "bob already approved q1 (1 of 2 approvals, by bob)" in twice.value.message

        # Every surface says so: the gateway's JSON, the interrupt the run ended with,
        # and parley show.
        shown = (await http.get(f"/v1/conversations/{sid}", headers=auth(BOB_TOKEN))).json()
        (card,) = shown["pending"]
        assert card["approvals_needed"] == 2 and [a["by"] for a in card["approvals"]] == ["bob"]
        events = (await conversations.events(sid, "alice", limit=5_000)).events
        interrupts = [
            i
            for e in events
            if e.event["type"] == "RUN_FINISHED"
            for i in e.event.get("outcome", {}).get("interrupts", [])
        ]
        assert interrupts[-1]["metadata"]["approved_by"] == ["bob"]
        assert interrupts[-1]["metadata"]["approvals_needed"] == 2
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": conversations.temporal.service_client.config.target_host,
            "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        }

        def parley(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*PARLEY, *args, "--session", sid],
                env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip

        # Each reader is told what they may do: the hint to decide
        # goes only to those whose approve would be taken, and everyone reads who the
        # call waits for.
        *shown, twice = await asyncio.gather(
            *(
                asyncio.to_thread(parley, "show", "--user", who)
                for who in ("carol", "bob", "alice")
            ),
            asyncio.to_thread(parley, "approve", "--user", "bob", "q1"),
        )
        assert twice.returncode == 0, twice.stderr  # the same command again: said, not run
        assert twice.stdout.startswith("q1 already approved by bob at "), twice.stdout
        assert "1 of 2 approvals: bob; it runs once enough other reviewers" in twice.stdout
        for show in shown:
            assert show.returncode == 0, show.stderr
            assert "1 of 2 approvals: bob" in show.stdout, show.stdout
            assert "waiting for 1 more reviewer: carol or dave" in show.stdout, show.stdout
        carol, bob, alice = (show.stdout for show in shown)
        assert "Decide with: parley approve|edit|reject|respond --session" in carol
        assert "--user carol" in carol
        for other, name in ((bob, "bob"), (alice, "alice")):
            assert "Decide with" not in other and "Waiting for a decision:" in other, other
            assert (
                f"You may reject: parley reject|respond --session {sid} --user {name} q1" in other
            )

        done = await conversations.decide(sid, "carol", approve(waiting))
        assert done.status == "completed" and done.reply == "Pushed after two reviews."
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main"]

        # Deciding again what is decided says who decided it, when, and how: the same
        # command again exits 0 with that line; another decision is refused with it, by
        # the CLI and the gateway alike.
        again, other = await asyncio.gather(
            asyncio.to_thread(parley, "approve", "--user", "carol", "q1"),
            asyncio.to_thread(parley, "reject", "--user", "bob", "q1"),
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("q1 already decided by carol at "), again.stdout
        assert again.stdout.rstrip().endswith("UTC: approved"), again.stdout
        assert other.returncode != 0 and "q1 already decided by carol at" in other.stderr
        late = await http.post(
            f"/v1/conversations/{sid}/decisions",
            headers=auth(BOB_TOKEN),
            json={"decisions": [{"tool_call_id": "q1", "action": "reject"}]},
        )
        assert late.status_code == 409, late.text
        assert "q1 already decided by carol at" in late.json()["error"]["message"]
        state = await conversations.state(sid, "alice")
        decided = [e for e in state.audit if e.event == "decided"]
        assert [(e.actor, e.detail.get("approvals")) for e in decided] == [
            ("bob", "1 of 2"),
            ("carol", "2 of 2"),
        ]


async def test_a_rejection_answers_the_call_and_the_next_proposal_counts_from_zero(
    parley_worker,
) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "r1", branch="main")]},
        {"content": "", "tool_calls": [call("push_branch", "r2", branch="main")]},
        {"content": "Pushed."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        (first,) = (
            await conversations.send(sid, "alice", "push main", reviewers=REVIEWERS)
        ).pending
        await conversations.decide(sid, "bob", approve(first))  # 1 of 2
        rejected = await conversations.decide(
            sid, "carol", [Decision(tool_call_id="r1", action="reject", message="not today")]
        )
        # The model read the rejection and proposed the very same call again: a new
        # call, whose count starts from zero (bob's approval was of r1, now answered).
        (again,) = rejected.pending
        assert again.tool_call_id == "r2" and again.approvals == []
        assert runs_in(sid, "push_branch") == []
        still = await conversations.decide(sid, "bob", approve(again))
        assert still.status == "awaiting_approval"  # 1 of 2 again, not 2
        assert runs_in(sid, "push_branch") == []
        await conversations.decide(sid, "dave", approve(again))
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main"]


async def test_an_edit_is_counted_again(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "e1", branch="main")]},
        {"content": "Pushed."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        (first,) = (
            await conversations.send(sid, "alice", "push main", reviewers=REVIEWERS)
        ).pending
        await conversations.decide(sid, "bob", approve(first))
        unchanged = [Decision(tool_call_id="e1", action="edit", args={"branch": "main"})]
        with pytest.raises(ConversationRefused) as noop:  # an edit that changes nothing
            await conversations.decide(sid, "carol", unchanged)
        assert "leaves its arguments as they are" in noop.value.message
        edited = await conversations.decide(
            sid, "carol", [Decision(tool_call_id="e1", action="edit", args={"branch": "Main"})]
        )
        # An edit is a new proposal: bob's approval does not carry over, and carol's
        # edit did not run it.
        (waiting,) = edited.pending
        assert waiting.approvals == [] and waiting.edited_by == "carol"
        assert runs_in(sid, "push_branch") == []
        # bob approves again, the edited arguments: a decision of its own, never
        # answered with his first approval's result.
        again = await conversations.decide(sid, "bob", approve(waiting))
        assert [a.by for a in again.pending[0].approvals] == ["bob"]
        await conversations.decide(sid, "dave", approve(waiting))
        assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["Main"]


async def test_the_worker_refuses_a_quorum_call_with_fewer_approvers() -> None:
    """Whatever the workflow says, this worker's own rule wants two reviewers."""
    activities = ToolActivities(registry())
    request = RunToolInput(
        name="push_branch",
        args={"branch": "main"},
        tool_call_id="w1",
        user_id="alice",
        approved_by="bob",
        approvals=["bob", "alice"],  # the requester never counts
        proposed_at=datetime.now(UTC),
    )
    with pytest.raises(ApplicationError) as refused:
        await activities.run_tool(request)
    assert "needs 2 approvals by reviewers, and it has 1" in refused.value.message


def test_the_policy_file_takes_approvals(tmp_path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text('[[rule]]\nname = "two"\ntool = "push_*"\ndecide = "confirm"\napprovals = 2\n')
    (rule,) = load_policies(str(path)).rules
    assert rule.approvals == 2
    path.write_text('[[rule]]\nname = "two"\ntool = "push_*"\ndecide = "auto"\napprovals = 2\n')
    with pytest.raises(ValueError) as bad:
        load_policies(str(path))
    assert "approvals or an undo window apply to calls that wait" in str(bad.value)


def test_the_hint_names_only_what_the_reader_may_do() -> None:
    """``print_pending`` (``show``, and a turn's result): an approver is told to decide;
    a reader who may only reject is told that, naming the call; a spend approval offers
    approve and reject alone."""
    expires = datetime(2026, 12, 7, 10, 2, tzinfo=UTC)
    push = PendingCall(
        tool_call_id="q1", name="push_branch", args={"branch": "main"}, description="Push.",
        expires_at=expires, reviewer_rule="two", approvals_needed=2,
    )  # fmt: skip
    spend = PendingCall(
        tool_call_id="s1", name=SPEND_CALL, args={"total_tokens": 260_000, "mark": 200_000},
        description="Approve to go on (the mark rises by 200,000).", expires_at=expires,
    )  # fmt: skip

    def printed(call: PendingCall, view: Awaiting) -> str:
        console = Console(record=True, width=200)
        print_pending([call], console, session="s", user="bob", awaiting=[view])
        return console.export_text()

    text = "waiting for 1 more reviewer: carol or dave"
    mine = Awaiting(tool_call_id="q1", text=text, may_approve=True, may_decide=True)
    assert "Decide with: parley approve|edit|reject|respond --session s --user bob" in printed(
        push, mine
    )
    theirs = printed(push, mine.model_copy(update={"may_approve": False}))
    assert "Decide with" not in theirs and f"({text})" in theirs
    assert "You may reject: parley reject|respond --session s --user bob q1" in theirs
    shown = printed(spend, Awaiting(tool_call_id="s1", may_approve=True, may_decide=True))
    assert (
        "spend approval (s1)" in shown and "260,000 tokens used, past the mark of 200,000" in shown
    )
    assert "Decide with: parley approve|reject --session s --user bob" in shown
    assert "respond" not in shown and "edit" not in shown
