"""Conversations of any length and any payload size, against a real dev server: no
payload grows with the conversation, large content goes to the claim-check store or is
cut for the model with a note, and a message over the limit is refused up front."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowUpdateFailedError

from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel
from parley.client import ConversationRefused, Conversations
from parley.contracts import Decision, SendMessageInput, workflow_id_for
from parley.contracts.errors import ErrorType
from parley.tools import auto, confirm
from parley.workflows.conversation import ConversationWorkflow
from tests.support import call, registry, script
from tests.support.transcripts import new_session, runs_in, tool_messages

KB = 1024
MB = 1024 * KB
#: The acceptance bound on any single payload in a conversation's history.
PAYLOAD_BOUND = 256 * KB

PAGE_RUNS: Counter[str] = Counter()
SEEN: list[BaseMessage] = []


@tool
async def fetch_page(n: int, size: int = 20 * KB) -> str:
    """Fetch page n of a document (``size`` bytes of text)."""
    PAGE_RUNS[f"page-{n}-{size}"] += 1
    head = f"page {n}: "
    return head + "x" * (size - len(head))


class RecordingScript(ScriptFileChatModel):
    """The script model, remembering the messages of its latest call (what the model saw)."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        SEEN[:] = messages
        return super()._generate(messages, *args, **kwargs)


def _payloads(message: Any) -> list[Any]:
    """Every ``Payload`` inside a proto message."""
    if message.DESCRIPTOR.full_name == "temporal.api.common.v1.Payload":
        return [message]
    found = []
    for fd, value in message.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            found += [p for v in value.values() if hasattr(v, "DESCRIPTOR") for p in _payloads(v)]
        elif fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED:
            found += [p for v in value for p in _payloads(v)]
        else:
            found += _payloads(value)
    return found


async def history_of_every_run(client: Client, session_id: str) -> list[list[HistoryEvent]]:
    workflow_id = workflow_id_for(session_id)
    runs = [r async for r in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    return [
        [
            e
            async for e in client.get_workflow_handle(
                workflow_id, run_id=r.run_id
            ).fetch_history_events()
        ]
        for r in runs
    ]


async def largest_payload(client: Client, session_id: str) -> int:
    return max(
        p.ByteSize()
        for events in await history_of_every_run(client, session_id)
        for e in events
        for p in _payloads(e)
    )


async def turn_bytes(conv: Conversations, client: Client, sid: str, turn: Any) -> tuple[int, Any]:
    """The bytes of history one turn adds: its events up to its update's completion."""
    run_id = (await conv.handle(sid).describe()).run_id
    handle = client.get_workflow_handle(workflow_id_for(sid), run_id=run_id)
    before = len([e async for e in handle.fetch_history_events()])
    result = await turn()
    added = [e async for e in handle.fetch_history_events()][before:]
    ends = [
        i
        for i, e in enumerate(added)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]
    assert ends, "the turn's update completed in this run"
    return sum(e.ByteSize() for e in added[: ends[-1] + 1]), result


async def run_changes(conv: Conversations, sid: str, run_id: str, wait: float = 3.0) -> bool:
    """Whether the conversation moves to a new run within ``wait`` seconds."""
    deadline = asyncio.get_running_loop().time() + wait
    while asyncio.get_running_loop().time() < deadline:
        if (await conv.handle(sid).describe()).run_id != run_id:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_a_thousand_turns_with_a_20_kb_result_each(parley_worker, client) -> None:
    """Every turn an auto tool returns 20 KB. Turn 1,000 adds no more history than turn
    10 (within 1.5x), no payload is ever over 256 KB, the conversation continues-as-new,
    and a call pending across a continue-as-new is still approvable afterwards."""
    turns, threshold = 1000, 1000
    model = RecordingScript(entries=[])
    entries = model.entries

    def plan(entry: dict[str, Any]) -> None:
        entries.append(ScriptEntry.model_validate(entry))

    async with parley_worker(
        registry(auto(fetch_page)), model, continue_as_new_after_events=threshold
    ) as conv:
        sid = new_session()
        sizes: dict[int, int] = {}
        survived: list[str] = []
        for n in range(1, turns + 1):
            plan({"content": "", "tool_calls": [call("fetch_page", f"p{n}", n=n)]})
            plan({"content": f"read page {n}"})

            async def fetch(n: int = n) -> Any:
                return await conv.send(sid, "ivy", f"read page {n}")

            if n in (10, turns):
                sizes[n], result = await turn_bytes(conv, client, sid, fetch)
            else:
                result = await fetch()
            assert result.status == "completed" and result.reply == f"read page {n}", result

            # Close to the continue-as-new threshold, a confirm call: its pending turn
            # crosses the threshold, so the run continues-as-new while it is pending.
            described = await conv.handle(sid).describe()
            length = described.raw_description.workflow_execution_info.history_length
            if threshold - length <= 8:
                call_id = f"w{n}"
                plan({"content": "", "tool_calls": [call("write_record", call_id, title=f"t{n}")]})
                plan({"content": f"wrote t{n}"})
                pending = await conv.send(sid, "ivy", f"write t{n}")
                assert pending.status == "awaiting_approval"
                moved = await run_changes(conv, sid, described.run_id)
                done = await conv.decide(
                    sid, "ivy", [Decision(tool_call_id=call_id, action="approve")]
                )
                assert done.status == "completed" and done.reply == f"wrote t{n}"
                assert [r["title"] for r in runs_in(sid, "write_record")][-1] == f"t{n}"
                if moved:
                    survived.append(call_id)

        assert sizes[turns] <= 1.5 * sizes[10], sizes
        assert await largest_payload(client, sid) <= PAYLOAD_BOUND
        runs = await history_of_every_run(client, sid)
        assert len(runs) >= 3, "the conversation continued-as-new"
        assert survived, "some confirm call was pending across a continue-as-new"
        state = await conv.state(sid, "ivy")
        tool_messages(state.transcript)  # every call in the kept window answered once
        assert len(runs_in(sid, "write_record")) == state.counters.turns - turns
        assert all(PAGE_RUNS[f"page-{n}-{20 * KB}"] == 1 for n in range(1, turns + 1))

        old = await conv.transcript(sid, "ivy", offset=0, limit=4)
        assert isinstance(old[0], HumanMessage) and old[0].content == "read page 1"
        assert isinstance(old[2], ToolMessage) and old[2].content.startswith("page 1: ")


async def test_results_of_1_5_and_20_mb_keep_the_conversation_going(parley_worker, client) -> None:
    """1 and 5 MB go to the claim-check store and the model reads their beginning with a
    note; 20 MB is over the worker's 16 MB limit and the model is told so. Each tool
    ran exactly once, `show` works, and no payload in history is over 256 KB."""
    sizes = [1 * MB, 5 * MB, 20 * MB]
    entries: list[dict[str, Any]] = []
    for n, size in enumerate(sizes, 1):
        entries.append(
            {"content": "", "tool_calls": [call("fetch_page", f"big{n}", n=n, size=size)]}
        )
        entries.append({"content": f"got {n}"})
    entries.append({"content": "still here"})
    model = RecordingScript(entries=[ScriptEntry.model_validate(e) for e in entries])
    async with parley_worker(registry(auto(fetch_page)), model) as conv:
        sid = new_session()
        for n, size in enumerate(sizes, 1):
            turn = await conv.send(sid, "jo", f"fetch {n}")
            assert turn.status == "completed" and turn.reply == f"got {n}", turn
            assert PAGE_RUNS[f"page-{n}-{size}"] == 1  # ran exactly once
            [seen] = [m for m in SEEN if isinstance(m, ToolMessage) and m.tool_call_id == f"big{n}"]
            if size < 16 * MB:
                assert seen.content.startswith(f"page {n}: xxx")
                assert f"this result is {size:,} characters long" in seen.content
            else:
                assert seen.content.startswith("Error: the tool ran, but its result is")
                assert "PARLEY_MAX_TOOL_RESULT_BYTES" in seen.content
                assert "it was not run again" in seen.content
            [preview] = turn.results
            assert len(preview.content) < 10_000  # the update result carries a preview

        assert (await conv.send(sid, "jo", "and now?")).reply == "still here"
        state = await conv.state(sid, "jo")  # `show`
        answers = tool_messages(state.transcript)
        assert [answers[f"big{n}"].artifact["status"] for n in (1, 2, 3)] == [
            "success",
            "success",
            "error",
        ]
        assert await largest_payload(client, sid) <= PAYLOAD_BOUND


async def test_a_3_mb_message_is_refused_and_the_conversation_goes_on(parley_worker) -> None:
    model = script({"content": "hello"}, {"content": "hello again"})
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        assert (await conv.send(sid, "kim", "hi")).reply == "hello"
        huge = "y" * (3 * MB)
        with pytest.raises(ConversationRefused) as refused:
            await conv.send(sid, "kim", huge)
        assert refused.value.error_type == ErrorType.MESSAGE_TOO_LARGE
        assert "3,145,728 bytes" in refused.value.message and "1,048,576" in refused.value.message

        # A client that skips the local check meets the workflow's validator: the
        # update is rejected before it enters history (it travels by claim check).
        handle = conv.handle(sid)
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(
                ConversationWorkflow.send_message,
                SendMessageInput(text=huge, message_id="huge-1", user_id="kim"),
            )
        assert "3,145,728 bytes" in str(rejected.value.cause)
        assert (await conv.send(sid, "kim", "still there?")).reply == "hello again"
        state = await conv.state(sid, "kim")
        assert [m.content for m in state.transcript if isinstance(m, HumanMessage)] == [
            "hi",
            "still there?",
        ]


EXPORTS: Counter[str] = Counter()


@tool
async def export_rows(what: str, size: int) -> str:
    """Export rows (changes the world: it needs confirmation)."""
    EXPORTS[what] += 1
    if what == "names":  # a file name os.listdir returns for undecodable bytes
        return "report-\udcff.txt"
    return "z" * size


async def test_an_unstorable_or_oversized_confirmed_result_is_reported_never_rerun(
    parley_worker, client
) -> None:
    """A confirm tool whose result is over the worker's limit, or holds a lone surrogate,
    or whose argument is 3 MB: each runs exactly once per approval, and the model reads
    what happened. (A reply carrying a 3 MB argument is past the default bound on what
    one model call may return, 1 MiB: this worker raises it.)"""
    big_arg = "a" * (3 * MB)
    calls = [
        call("export_rows", "x1", what="huge", size=2 * MB),
        call("export_rows", "x2", what="names", size=0),
        call("export_rows", "x3", what=big_arg, size=10),
    ]
    model = RecordingScript(
        entries=[
            ScriptEntry.model_validate(e)
            for e in [{"content": "", "tool_calls": calls}, {"content": "exported"}]
        ]
    )
    async with parley_worker(
        registry(confirm(export_rows)),
        model,
        max_tool_result_bytes=1 * MB,
        max_model_reply_bytes=8 * MB,
    ) as conv:
        sid = new_session()
        turn = await conv.send(sid, "lou", "export")
        assert turn.status == "awaiting_approval" and len(turn.pending) == 3
        done = await conv.decide(
            sid, "lou", [Decision(tool_call_id=c["id"], action="approve") for c in calls]
        )
        assert done.status == "completed" and done.reply == "exported"
        assert EXPORTS == Counter({"huge": 1, "names": 1, big_arg: 1})  # once each

        seen = {m.tool_call_id: m.content for m in SEEN if isinstance(m, ToolMessage)}
        assert seen["x1"].startswith("Error: the tool ran, but its result is")
        assert "it was not run again" in seen["x1"]
        assert seen["x2"] == "report-\\udcff.txt"  # escaped, not lost
        assert seen["x3"] == "z" * 10
        results = {r.tool_call_id: r for r in done.results}
        assert results["x1"].error is not None
        assert results["x1"].error.type == ErrorType.RESULT_TOO_LARGE
        assert await largest_payload(client, sid) <= PAYLOAD_BOUND
