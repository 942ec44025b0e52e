"""End to end: previews in the gate. A pending call of a tool with a preview shows what it
would change (the commits a push would send, computed by the ``preview_call`` activity
before the turn rests); the approval is of those arguments and that preview: a remote
that moved on between the preview and the decision refuses the approval, runs nothing,
and the call waits with the new preview; a decision pinned to an old preview hash is
refused before it enters history; a preview that fails never blocks. Real repositories
and a bare remote in a temporary directory, a real worker and dev server."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.client import ConversationRefused
from parley.contracts import Decision
from parley.contracts.errors import ErrorType
from tests.support.git_remotes import (
    PREPARE,
    PUSH,
    bare,
    commit_file,
    git,
    push_from_elsewhere,
    remote_commit,
)
from tests.support.plans import inject_faults, plans_registry, rows
from tests.support.scripts import call, script
from tests.support.transcripts import new_session

USER = "maria"


def pushing_model():
    """Prepare a worktree, then (after the test commits in it) push it, twice."""
    return script(
        {"content": "", "tool_calls": [call("git_prepare_worktree", "p1", **PREPARE)]},
        {"content": "Prepared."},
        {"content": "", "tool_calls": [call("git_push_branch", "s1", **PUSH)]},
        {"content": "Pushed."},
    )


async def prepared(conversations, sid: str) -> Path:
    turn = await conversations.send(sid, USER, "prepare feat/x")
    [pending] = turn.pending
    assert pending.preview is not None and pending.preview.status == "ok"
    assert pending.preview.data["branch"] == "feat/x"
    done = await conversations.decide(sid, USER, [Decision(tool_call_id="p1", action="approve")])
    assert done.status == "completed", done
    return Path(done.results[0].payload["worktree"])


async def test_the_preview_shows_exactly_what_the_push_then_sends(
    parley_worker, git_tools, demo: Path
) -> None:
    async with parley_worker(git_tools, pushing_model()) as conversations:
        sid = new_session()
        worktree = await prepared(conversations, sid)
        mine = commit_file(worktree, "notes.txt", "mine\n", "My commit")

        turn = await conversations.send(sid, USER, "push it")
        [pending] = turn.pending
        assert pending.preview is not None and pending.preview.status == "ok"
        shown = [c["sha"] for c in pending.preview.data["commits"]]
        assert mine in shown or any(mine.startswith(s) for s in shown)
        assert remote_commit(demo, "feat/x") is None  # nothing pushed before the decision
        state = await conversations.state(sid, USER)
        assert state.pending[0].preview == pending.preview  # the state shows it too

        done = await conversations.decide(
            sid,
            USER,
            [Decision(tool_call_id="s1", action="approve", preview_hash=pending.preview.hash)],
        )
        assert done.status == "completed" and done.results[0].status == "success"
        assert remote_commit(demo, "feat/x") == mine
        sent = git(bare(demo), "rev-list", "feat/x", "--not", "main")
        assert sent.split() == [mine]


async def test_a_remote_that_moved_refuses_the_stale_approval(
    parley_worker, git_tools, demo: Path, tmp_path: Path
) -> None:
    async with parley_worker(git_tools, pushing_model()) as conversations:
        sid = new_session()
        worktree = await prepared(conversations, sid)
        commit_file(worktree, "notes.txt", "mine\n", "My commit")
        turn = await conversations.send(sid, USER, "push it")
        [pending] = turn.pending
        assert pending.preview is not None and pending.preview.refused is None
        shown = pending.preview.hash

        # Someone else creates the branch on the remote: the push is no longer the one shown.
        git(demo / "repos" / "web", "push", "-q", "origin", "main:refs/heads/feat/x")
        theirs = push_from_elsewhere(demo, "feat/x", tmp_path / "elsewhere")

        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(sid, USER, [Decision(tool_call_id="s1", action="approve")])
        assert refused.value.error_type == ErrorType.INVALID_DECISION
        assert "no longer what was shown" in str(refused.value)
        assert remote_commit(demo, "feat/x") == theirs  # nothing was pushed
        state = await conversations.state(sid, USER)
        [waiting] = state.pending
        assert waiting.preview is not None and waiting.preview.hash != shown
        assert waiting.preview.refused is not None  # now a non-fast-forward

        # A decision pinned to the preview it saw before is refused at the door.
        with pytest.raises(ConversationRefused) as stale:
            await conversations.decide(
                sid, USER, [Decision(tool_call_id="s1", action="approve", preview_hash=shown)]
            )
        assert "preview of s1 is no longer" in str(stale.value)
        assert remote_commit(demo, "feat/x") == theirs


async def test_a_preview_that_fails_is_shown_and_never_blocks(parley_worker, plans) -> None:
    model = script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title="Q4 roadmap")]},
        {"content": "Created."},
    )
    async with parley_worker(plans_registry(plans), model) as conversations:
        sid = new_session()
        inject_faults(plans, {"status": 400, "body": {"message": "cannot read plans now"}})
        turn = await conversations.send(sid, USER, "plan Q4")
        [pending] = turn.pending
        assert pending.preview is not None and pending.preview.status == "failed"
        assert "cannot read plans now" in str(pending.preview.error)
        assert rows(plans, USER) == []

        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="c1", action="approve")]
        )
        assert done.status == "completed" and done.results[0].status == "success"
        assert [row["title"] for row in rows(plans, USER)] == ["Q4 roadmap"]
