"""End to end: an approval link and a preview that changed. The link's page shows what
the push would change; the remote moves on before the click, so the approval is
refused and nothing is pushed: the page says so, shows what the push would change now
and offers to approve that. The refusal does not use the link up: the old page, sent
again, is refused the same way, and approving the new preview pushes once. Real
repositories and a bare remote, a real worker, gateway and dev server."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from parley.contracts import Decision
from parley.contracts.links import ApprovalLink
from tests.support.gateway import serve_gateway
from tests.support.git_remotes import PREPARE, PUSH, commit_file, git, remote_commit
from tests.support.scripts import call, script
from tests.support.transcripts import new_session

USER = "maria"
SECRET = "test-link-secret-0123456789abcdefghijklmnop"
HIDDEN_HASH = re.compile(r'name="preview_hash" value="([0-9a-f]+)"')


def pushing_model():
    return script(
        {"content": "", "tool_calls": [call("git_prepare_worktree", "p1", **PREPARE)]},
        {"content": "Prepared."},
        {"content": "", "tool_calls": [call("git_push_branch", "s1", **PUSH)]},
        {"content": "Pushed."},
    )


def shown_hash(page: str) -> str:
    [value] = HIDDEN_HASH.findall(page)
    return value


async def test_a_link_refused_for_a_changed_preview_shows_the_new_one_and_ran_nothing(
    parley_worker, git_tools, demo: Path
) -> None:
    async with (
        parley_worker(git_tools, pushing_model(), link_secret=SECRET) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        sid = new_session()
        await conversations.send(sid, USER, "prepare feat/x")
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="p1", action="approve")]
        )
        mine = commit_file(
            Path(done.results[0].payload["worktree"]), "notes.txt", "mine\n", "My commit"
        )
        turn = await conversations.send(sid, USER, "push it")
        [pending] = turn.pending
        assert pending.preview is not None
        expires = int((datetime.now(UTC) + timedelta(hours=1)).timestamp())
        link = ApprovalLink(
            session_id=sid,
            tool_call_id="s1",
            args_hash=pending.args_hash,
            user_id=USER,
            action="approve",
            expires=expires,
        )
        url = f"{base}/links/{link.sign(SECRET)}"

        page = await http.get(url)
        assert page.status_code == 200 and shown_hash(page.text) == pending.preview.hash

        # The branch appears on the remote (at main) after the page was shown: the push
        # is no longer the one shown (it would update the branch, not create it).
        git(demo / "repos" / "web", "push", "-q", "origin", "main:refs/heads/feat/x")
        at_main = remote_commit(demo, "feat/x")
        refused = await http.post(url, data={"preview_hash": pending.preview.hash})
        assert refused.status_code == 409, refused.text
        assert "The preview changed" in refused.text
        assert "Nothing ran" in refused.text and "your approval was refused" in refused.text
        new_hash = shown_hash(refused.text)
        assert new_hash != pending.preview.hash
        assert 'data-testid="preview"' in refused.text  # what it would change now
        assert f"/#c={sid}" in refused.text  # or decide on the conversation's page
        assert remote_commit(demo, "feat/x") == at_main  # nothing was pushed
        state = await conversations.state(sid, USER)
        [waiting] = state.pending
        assert waiting.preview is not None and waiting.preview.hash == new_hash
        assert not [a for a in state.audit if a.tool_call_id == "s1" and a.event == "decided"]

        # The old page sent again (a second click) is refused the same way.
        again = await http.post(url, data={"preview_hash": pending.preview.hash})
        assert again.status_code == 409 and shown_hash(again.text) == new_hash
        assert remote_commit(demo, "feat/x") == at_main
        # Opened again, the link shows the new preview, to approve as it is now.
        reopened = await http.get(url)
        assert reopened.status_code == 200 and shown_hash(reopened.text) == new_hash

        approved = await http.post(url, data={"preview_hash": new_hash})
        assert approved.status_code == 200, approved.text
        assert "You approved git_push_branch; it ran: success." in approved.text
        assert remote_commit(demo, "feat/x") == mine
        state = await conversations.state(sid, USER)
        decided = [a for a in state.audit if a.tool_call_id == "s1" and a.event == "decided"]
        assert [a.detail["link"] for a in decided] == [link.link_id]
        used = await http.post(url, data={"preview_hash": new_hash})
        assert used.status_code == 409 and "already used" in used.text
