"""Previews and undo windows against quorums and remembered decisions, end to end (a
real worker and dev server; the tool and its preview are in-process, so the test moves
what the preview reads):

- a quorum's approvals are of what was shown: when the preview changes between the
  first and the second approval, the second is refused and the first no longer counts;
  the call is scheduled only once two reviewers approved the new preview; an edit
  pinned to a stale preview is refused, and an edit waits with its own preview; any
  approver of a quorum may undo the call in its window;
- a remembered approval of a call whose rule has an undo window is an approval like
  any other: the later call waits out its window, and the owner may undo it;
- a link's approval of a call with an undo window answers when the call is scheduled;
- a fork does not revert what ran in the conversation it was forked from, and its
  snapshot's ``revertible`` (what every surface offers) names only its own calls.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langchain_core.tools import tool

from parley.client import ConversationRefused, Conversations
from parley.client.forks import fork
from parley.client.reverts import revert
from parley.contracts import Decision, InverseCall, PolicyRule, ToolContext
from parley.contracts.links import ApprovalLink
from parley.tools import ToolRegistry, auto, confirm
from tests.support import call, script
from tests.support.gateway import serve_gateway
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

OWNER = "alice"
#: What the preview reads (the "remote"), and each run of the tool, in this process.
WORLD: dict[str, str] = {"target": "v1"}
RUNS: list[str] = []
SECRET = "test-link-secret-0123456789abcdefghijklmnop"


@tool
async def publish_note(text: str) -> str:
    """Publish a note."""
    RUNS.append(text)
    return f"published {text}"


async def _where(args: dict[str, Any], context: ToolContext) -> Any:
    return {"text": args["text"], "target": WORLD["target"]}


def note(call_id: str, text: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [call("publish_note", call_id, text=text)]}


async def test_a_quorum_approval_counts_for_the_preview_shown_and_any_approver_undoes(
    parley_worker,
) -> None:
    rule = PolicyRule(
        name="two", tool="publish_note", decide="confirm", approvals=2, undo_seconds=600
    )
    registry = ToolRegistry([confirm(publish_note, preview=_where)], rules=[rule])
    WORLD["target"] = "v1"
    model = script(note("q1", "quorum-preview"), {"content": "Not published."})
    async with parley_worker(registry, model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, OWNER, "publish", reviewers=["bob", "carol"])
        [shown] = turn.pending
        assert shown.preview is not None
        first = Decision(tool_call_id="q1", action="approve", preview_hash=shown.preview.hash)
        assert (await conversations.decide(sid, "bob", [first])).status == "awaiting_approval"

        WORLD["target"] = "v2"  # the target moves on between the two approvals
        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(
                sid, "carol", [Decision(tool_call_id="q1", action="approve")]
            )
        assert "no longer what was shown" in str(refused.value)
        [waiting] = (await conversations.state(sid, OWNER)).pending
        assert waiting.preview is not None and waiting.preview.hash != shown.preview.hash
        assert waiting.approvals == []  # bob approved what is no longer shown

        new = Decision(tool_call_id="q1", action="approve", preview_hash=waiting.preview.hash)
        assert (await conversations.decide(sid, "carol", [new])).status == "awaiting_approval"
        assert "quorum-preview" not in RUNS

        # An edit pinned to a preview no longer shown is refused; one pinned to the
        # shown preview is a new proposal: it waits with its own preview, counted again.
        edit = Decision(tool_call_id="q1", action="edit", args={"text": "quorum-edited"})
        with pytest.raises(ConversationRefused) as stale:
            await conversations.decide(
                sid, "bob", [edit.model_copy(update={"preview_hash": shown.preview.hash})]
            )
        assert "preview of q1 is no longer" in str(stale.value)
        pinned = edit.model_copy(update={"preview_hash": waiting.preview.hash})
        assert (await conversations.decide(sid, "bob", [pinned])).status == "awaiting_approval"
        [edited] = (await conversations.state(sid, OWNER)).pending
        assert edited.preview is not None and edited.approvals == []
        assert edited.preview.data == {"text": "quorum-edited", "target": "v2"}
        again = Decision(tool_call_id="q1", action="approve", preview_hash=edited.preview.hash)
        await conversations.decide(sid, "carol", [again])

        # The quorum is met: the call waits out its window, and either approver (here
        # the first, not the one whose approval completed it) may undo it.
        deciding = asyncio.create_task(conversations.decide(sid, "bob", [again]))
        [waiting] = await eventually(lambda: _window_or_done(conversations, sid, deciding))
        assert (waiting.approved_by, waiting.approvers) == ("bob", ["carol"])
        assert (await conversations.undo(sid, "carol", ["q1"])).undone == ["q1"]
        done = await deciding
        assert done.status == "completed" and done.results[-1].status == "rejected"
        assert "quorum-edited" not in RUNS and "quorum-preview" not in RUNS


async def _window_or_done(conversations: Conversations, sid: str, sending: asyncio.Task) -> Any:
    if sending.done():
        return "the turn ended without a window"
    return (await conversations.state(sid, OWNER)).scheduled


async def test_a_remembered_approval_still_waits_out_the_rules_undo_window(
    parley_worker,
) -> None:
    rule = PolicyRule(name="undoable", tool="publish_note", decide="confirm", undo_seconds=600)
    registry = ToolRegistry([confirm(publish_note)], rules=[rule])
    model = script(
        note("u1", "remembered-window"),
        {"content": "Undone."},
        note("u2", "remembered-window"),
        {"content": "Undone again."},
    )
    async with parley_worker(registry, model) as conversations:
        sid = new_session()
        await conversations.send(sid, OWNER, "publish")
        approve = [Decision(tool_call_id="u1", action="approve", remember=True)]
        deciding = asyncio.create_task(conversations.decide(sid, OWNER, approve))
        await eventually(lambda: _window_or_done(conversations, sid, deciding))
        assert (await conversations.undo(sid, OWNER, ["u1"])).undone == ["u1"]
        await deciding

        # The same call again: the remembered approval lets it run, after its window.
        sending = asyncio.create_task(conversations.send(sid, OWNER, "publish again"))
        window = await eventually(lambda: _window_or_done(conversations, sid, sending))
        assert isinstance(window, list), window
        assert [(s.tool_call_id, s.approved_by) for s in window] == [("u2", OWNER)]
        # A fork cannot keep the call that waits (it has no answer yet); one cut before it
        # holds nothing scheduled, so the call can run (or be undone) only here.
        with pytest.raises(ConversationRefused) as cut:
            await fork(conversations, sid, OWNER, 6, new_session())
        assert "u2" in str(cut.value)
        forked = new_session()
        await fork(conversations, sid, OWNER, 4, forked)
        copy = await conversations.state(forked, OWNER)
        assert copy.scheduled == [] and copy.pending == []
        assert (await conversations.undo(sid, OWNER, ["u2"])).undone == ["u2"]
        done = await sending
        assert done.results[-1].status == "rejected" and "remembered-window" not in RUNS
        u2 = [
            a.event for a in (await conversations.state(sid, OWNER)).audit if a.tool_call_id == "u2"
        ]
        assert u2[-2:] == ["scheduled", "undone"] and "ran" not in u2


async def test_a_link_approval_answers_with_the_window_and_the_call_can_be_undone(
    parley_worker,
) -> None:
    """A link's approve of a call with an undo window answers once the call is scheduled
    (when it runs, who may undo it), not after the window; the owner's undo still works."""
    rule = PolicyRule(name="undoable", tool="publish_note", decide="confirm", undo_seconds=600)
    registry = ToolRegistry([confirm(publish_note)], rules=[rule])
    model = script(note("l1", "link-window"), {"content": "Undone."})
    async with (
        parley_worker(registry, model, link_secret=SECRET) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        sid = new_session()
        [pending] = (await conversations.send(sid, OWNER, "publish")).pending
        expires = int((datetime.now(UTC) + timedelta(hours=1)).timestamp())
        link = ApprovalLink(
            session_id=sid,
            tool_call_id="l1",
            args_hash=pending.args_hash,
            user_id=OWNER,
            action="approve",
            expires=expires,
        )
        url = f"{base}/links/{link.sign(SECRET)}"
        posting = asyncio.create_task(http.post(url, data={}))
        await eventually(lambda: _window_or_done(conversations, sid, posting))
        page = await eventually(lambda: posting.done() and posting.result(), what="the page")
        assert page.status_code == 200, page.text
        assert "undo window" in page.text and "runs at" in page.text
        assert "link-window" not in RUNS
        assert (await conversations.undo(sid, OWNER, ["l1"])).undone == ["l1"]
        await eventually(lambda: _answered(conversations, sid, "l1"))
        assert "link-window" not in RUNS


async def _answered(conversations: Conversations, sid: str, call_id: str) -> bool:
    state = await conversations.state(sid, OWNER)
    return any(a.event == "undone" and a.tool_call_id == call_id for a in state.audit)


UNPUBLISHED: list[str] = []


@tool
async def unpublish_note(text: str) -> str:
    """Take a published note down."""
    UNPUBLISHED.append(text)
    return f"unpublished {text}"


def _inverse(args: dict[str, Any], result: Any) -> InverseCall:
    return InverseCall(name="unpublish_note", args={"text": args["text"]})


async def test_a_fork_refuses_to_revert_a_call_that_ran_in_its_origin(parley_worker) -> None:
    """A fork holds the origin's results as messages, not its effects: reverting a call
    that ran before the cut is refused there, naming the conversation it ran in (where
    it still may be reverted, once)."""
    registry = ToolRegistry([auto(publish_note, compensate=_inverse), auto(unpublish_note)])
    model = script(
        note("f1", "forked-note"),
        {"content": "Published."},
        note("f2", "fork-own-note"),  # in the fork only
        {"content": "Done."},  # the fork's answer, and the origin's after its revert
    )

    async def revertible(session_id: str) -> list[str]:
        return (await conversations.state(session_id, OWNER)).revertible

    async with parley_worker(registry, model) as conversations:
        origin, forked = new_session(), new_session()
        await conversations.send(origin, OWNER, "publish")
        assert await revertible(origin) == ["f1"]
        await fork(conversations, origin, OWNER, 4, forked)
        assert await revertible(forked) == []  # before its first turn, too
        await conversations.send(forked, OWNER, "go on here")
        assert await revertible(forked) == ["f2"]  # its own call, not the inherited one
        with pytest.raises(ConversationRefused) as refused:
            await revert(conversations, forked, OWNER, "f1")
        assert origin in str(refused.value) and "\n" not in str(refused.value)
        assert UNPUBLISHED == []
        done = await revert(conversations, origin, OWNER, "f1")
        assert done.status == "completed" and UNPUBLISHED == ["forked-note"]
        assert await revertible(origin) == []  # reverted; unpublish_note has no inverse
