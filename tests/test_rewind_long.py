"""Rewind at any length: a conversation longer than the window the workflow keeps
(``KEPT_TRANSCRIPT_MESSAGES``) is cut against its whole transcript chain, not the
window: ``parley rewind --to 5`` works where ``fork --at 5`` did, a cut inside a call
and its answers is still refused naming the nearest cuts, and the workflow itself
refuses a cut its window and the given tail show to leave a call unanswered, whatever
the client says. Real dev server, worker, console script, gateway and Chromium; the
model is scripted at the model boundary, the tools are auto tools."""

from __future__ import annotations

import asyncio
import json

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from playwright.async_api import Page, expect
from temporalio.client import Client

from parley.client import ConversationRefused, Conversations
from parley.contracts import ContextRef, StateQuery
from parley.contracts.conversation import RewindInput, TranscriptCut
from parley.contracts.errors import ErrorType
from parley.contracts.state import TranscriptWindow
from parley.storage import LocalFileStorageDriver
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.lifecycle.rewind import run_refusal
from tests.support import registry
from tests.support.browser import page_gateway
from tests.support.cli import assert_one_line_error, parley
from tests.support.gateway import ALICE_TOKEN
from tests.support.long_transcripts import LATER_CALLS, Reads, longer_than_the_window
from tests.support.processes import cli_env
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually


async def run_id_of(conv: Conversations, sid: str) -> str:
    run_id = (await conv.handle(sid).describe()).run_id
    assert run_id
    return run_id


async def test_a_rewind_older_than_the_window_is_judged_against_the_whole_chain(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver, page: Page
) -> None:
    async with page_gateway(parley_worker, registry(), Reads(), page) as (base, conv):
        sid = new_session()
        total = await longer_than_the_window(conv, sid)
        env = cli_env(client, payload_store, conv.settings.task_queue)
        # Inside the second turn's answers (messages 8-27 answer its call, message 7):
        # refused, naming the nearest cuts of the whole transcript.
        inside = await asyncio.to_thread(
            parley, env, "rewind", "-s", sid, "--to", "9", "-u", "alice"
        )
        assert_one_line_error(
            inside,
            "the nearest cuts that leave none: 7 (after a user message) or 28 (after the "
            "answers to the model's calls)",
        )
        await the_workflow_refuses_what_its_window_and_the_tail_show(conv, sid)

        # The page: "try again from here" on the oldest message it shows.
        await page.goto(f"{base}/#token={ALICE_TOKEN}&c={sid}")
        shown = await conv.state(sid, "alice")
        humans = [
            shown.transcript_offset + i
            for i, m in enumerate(shown.transcript)
            if isinstance(m, HumanMessage)
        ]
        retry = page.get_by_test_id("transcript").get_by_test_id("try-again")
        await expect(retry).to_have_count(len(humans))
        first_run = await run_id_of(conv, sid)
        await retry.first.click()
        await expect(page.get_by_test_id("message-input")).to_have_value(f"read {LATER_CALLS}")
        await eventually(lambda: rewound_from(conv, sid, first_run), what="the page's rewind")
        assert (await conv.state(sid, "alice")).transcript_total == humans[0]

        # The CLI: to message 5, older than the window.
        second_run = await run_id_of(conv, sid)
        done = await asyncio.to_thread(
            parley, env, "rewind", "-s", sid, "--to", "5", "-u", "alice", "--json"
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["to"] == 5
        await eventually(lambda: rewound_from(conv, sid, second_run), what="the CLI's rewind")
        kept = await conv.transcript(sid, "alice")
        assert len(kept) == 5 and [type(m) for m in kept[:2]] == [HumanMessage, AIMessage]
        assert (await conv.send(sid, "alice", "and now?")).reply == "re: and now?"
        after = await conv.transcript(sid, "alice")
        assert [str(m.content) for m in after[5:]] == ["and now?", "re: and now?"]
        tool_messages(after)  # every call kept is answered, once
        assert total > len(after)


async def rewound_from(conv: Conversations, sid: str, run_id: str) -> bool:
    return await run_id_of(conv, sid) != run_id


async def the_workflow_refuses_what_its_window_and_the_tail_show(
    conv: Conversations, sid: str
) -> None:
    """A rewind request sent past the client (as ``temporal workflow update`` could):
    the workflow judges it again. Message 7 proposes 20 calls that messages 8-27 answer,
    so keeping 8 messages leaves them unanswered: the tail brought shows it."""
    head = await conv.state(sid, "alice", StateQuery(user_id="alice", transcript_limit=1))
    whole = await conv.transcript(sid, "alice", 0, 8)
    never_read = ContextRef(claim={"sha256": "0" * 64}, length=8)
    for tail, expected in [
        (whole[3:], "tool call b2-0, b2-1"),
        ([], "must bring its last kept messages"),
    ]:
        request = RewindInput(
            user_id="alice",
            cut=TranscriptCut(at=8, context=never_read, tail=tail),
            seen_length=head.transcript_total,
            seen_context=head.model_context,
        )
        try:
            await conv.ending_update(sid, ConversationWorkflow.rewind, request, "")
        except ConversationRefused as refused:
            assert refused.error_type == ErrorType.INVALID_MESSAGE
            assert expected in refused.message, refused.message
        else:
            raise AssertionError("the workflow took a cut that leaves calls unanswered")
    assert (await conv.state(sid, "alice")).transcript_total == head.transcript_total


def test_the_run_judges_a_cut_inside_its_window_exactly_and_an_older_one_by_its_tail() -> None:
    """The window starts with answers whose call is older than it (message 1 proposed
    c1 and c2; messages 2-3 answer them; the run keeps messages 3 on)."""
    calls = [{"name": "read_records", "args": {}, "id": c} for c in ("c1", "c2")]
    whole = [
        HumanMessage(content="read 2"),
        AIMessage(content="", tool_calls=calls),
        ToolMessage(content="ok", tool_call_id="c1"),
        ToolMessage(content="ok", tool_call_id="c2"),
        AIMessage(content="done"),
        HumanMessage(content="next"),
    ]
    window = TranscriptWindow(messages=whole[3:], offset=3)
    ref = ContextRef(claim={"sha256": "0" * 64}, length=1)

    def cut(at: int, tail: list) -> TranscriptCut:
        return TranscriptCut(at=at, context=ref.model_copy(update={"length": at}), tail=tail)

    # Older than the window: the tail decides, not the answers the window starts with.
    assert run_refusal(window, cut(1, whole[:1])) is None
    assert run_refusal(window, cut(2, whole[:2])) == (
        "cannot keep the first 2 messages: the model's tool call c1, c2 would be left "
        "without its answer; the nearest cuts that leave none: 1 (after a user message)"
    )
    assert "must bring its last kept messages" in str(run_refusal(window, cut(1, [])))
    # A tail of answers alone cannot show that c2 keeps its answer: refused.
    later = TranscriptWindow(messages=whole[4:], offset=4)
    assert "all tool answers" in str(run_refusal(later, cut(3, whole[2:3])))
    assert "tool call c2" in str(run_refusal(later, cut(3, whole[1:3])))
    assert run_refusal(later, cut(4, whole[1:4])) is None
    # Inside the window: exactly (an answer kept out whose call is older is caught).
    assert "tool call c2" in str(run_refusal(window, cut(3, [])))
    assert run_refusal(window, cut(4, [])) is None and run_refusal(window, cut(5, [])) is None
