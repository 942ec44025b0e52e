"""End to end: reverting a call that ran. ``revert`` asks the worker for the tool's
declared inverse and proposes it through the gate like any call: the built-in inverses
(``delete_plan``, ``git_delete_remote_branch``, ``git_remove_worktree``) are ``confirm``,
so each waits for its own decision, runs once, and restores the target (read from the
plans service's rows and the bare remote). The audit links both calls; a call is
reverted once; a tool with no inverse says so. Real plans service, real git remotes."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.client import ConversationRefused
from parley.client.reverts import revert
from parley.contracts import Decision
from tests.support import registry
from tests.support.git_remotes import PREPARE, PUSH, commit_file, git, remote_commit
from tests.support.plans import plans_registry, rows
from tests.support.scripts import call, script
from tests.support.transcripts import new_session

USER = "maria"
#: The scripted model answers by the count of assistant messages, and a revert's
#: proposal is one (Parley's own): this entry stands for it and is never asked for.
PARLEY_PROPOSES = {"content": "(Parley proposes the inverse)"}


def approve(call_id: str) -> list[Decision]:
    return [Decision(tool_call_id=call_id, action="approve")]


async def test_a_created_plan_is_reverted_through_the_gate(parley_worker, plans) -> None:
    model = script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title="Q4 roadmap")]},
        {"content": "Created."},
        PARLEY_PROPOSES,
        {"content": "Deleted it again."},
    )
    async with parley_worker(plans_registry(plans), model) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "plan Q4")
        done = await conversations.decide(sid, USER, approve("c1"))
        assert [r["title"] for r in rows(plans, USER)] == ["Q4 roadmap"]
        plan_id = done.results[0].payload["id"]

        turn = await revert(conversations, sid, USER, "c1")
        # The inverse is a call like any other: delete_plan is confirm, so it waits.
        assert turn.status == "awaiting_approval"
        [inverse] = turn.pending
        assert (inverse.tool_call_id, inverse.name) == ("revert-c1", "delete_plan")
        assert inverse.args["plan_id"] == plan_id
        assert [r["title"] for r in rows(plans, USER)] == ["Q4 roadmap"]  # nothing yet

        done = await conversations.decide(sid, USER, approve("revert-c1"))
        assert done.status == "completed" and done.reply == "Deleted it again."
        assert rows(plans, USER) == []

        state = await conversations.state(sid, USER)
        linked = {(a.tool_call_id, a.event): a.detail for a in state.audit}
        assert linked[("c1", "revert_proposed")] == {"inverse": "revert-c1"}
        assert linked[("revert-c1", "proposed")]["reverts"] == "c1"
        assert ("revert-c1", "ran") in linked
        with pytest.raises(ConversationRefused) as again:
            await revert(conversations, sid, USER, "c1")
        assert "already reverted" in str(again.value)


async def test_a_push_and_a_worktree_are_reverted(parley_worker, git_tools, demo: Path) -> None:
    other = {**PREPARE, "branch_slug": "y"}
    model = script(
        {"content": "", "tool_calls": [call("git_prepare_worktree", "p1", **PREPARE)]},
        {"content": "Prepared."},
        {"content": "", "tool_calls": [call("git_push_branch", "s1", **PUSH)]},
        {"content": "Pushed."},
        PARLEY_PROPOSES,
        {"content": "The branch is gone from the remote."},
        {"content": "", "tool_calls": [call("git_prepare_worktree", "p2", **other)]},
        {"content": "Prepared feat/y."},
        PARLEY_PROPOSES,
        {"content": "The worktree is removed."},
        PARLEY_PROPOSES,
        {"content": "feat/x has moved on since it was prepared: I left it."},
    )
    async with parley_worker(git_tools, model) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "prepare feat/x")
        done = await conversations.decide(sid, USER, approve("p1"))
        worktree = Path(done.results[0].payload["worktree"])
        commit_file(worktree, "notes.txt", "mine\n", "My commit")
        await conversations.send(sid, USER, "push it")
        await conversations.decide(sid, USER, approve("s1"))
        assert remote_commit(demo, "feat/x") is not None

        turn = await revert(conversations, sid, USER, "s1")
        assert [p.name for p in turn.pending] == ["git_delete_remote_branch"]
        assert remote_commit(demo, "feat/x") is not None  # gated: nothing yet
        await conversations.decide(sid, USER, approve("revert-s1"))
        assert remote_commit(demo, "feat/x") is None

        await conversations.send(sid, USER, "prepare feat/y")
        done = await conversations.decide(sid, USER, approve("p2"))
        fresh = Path(done.results[0].payload["worktree"])
        turn = await revert(conversations, sid, USER, "p2")
        assert [p.name for p in turn.pending] == ["git_remove_worktree"]
        await conversations.decide(sid, USER, approve("revert-p2"))
        assert not fresh.exists()
        assert git(demo / "repos" / "web", "branch", "--list", "feat/y") == ""

        # feat/x has a commit made after it was prepared: its inverse refuses to remove it.
        await revert(conversations, sid, USER, "p1")
        done = await conversations.decide(sid, USER, approve("revert-p1"))
        assert done.results[0].status == "error" and "moved on" in done.results[0].content
        assert worktree.exists()


async def test_a_call_whose_tool_has_no_inverse_says_so(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("write_record", "w1", title="Q3")]},
        {"content": "Written."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "write Q3")
        await conversations.decide(sid, USER, approve("w1"))
        with pytest.raises(ConversationRefused) as refused:
            await revert(conversations, sid, USER, "w1")
        assert "write_record declares no inverse" in str(refused.value)
        with pytest.raises(ConversationRefused) as unknown:
            await revert(conversations, sid, USER, "nope")
        assert "nothing to revert" in str(unknown.value)
