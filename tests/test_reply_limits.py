"""No model can make Temporal end a run: what one model call may stream and return is
bounded, and a reply past the bound fails its turn as a model error in one line while
the conversation goes on.

Reported: a model endpoint that streamed 200 pieces of 120 KB in each of 3 calls; every
piece went into the run's history as a ``stream_delta`` signal, and Temporal terminated
the run at 52.5 MB; the next message got ``ConversationEnded``. Here the real
``langchain-openai`` client talks to ``FakeOpenAI`` (a chat-completions server on
127.0.0.1), through a real worker, the real gateway or the ``Conversations`` client, on
the real dev server: first the plain path (a streamed reply), then oversized streams,
an oversized reply that is not streamed, oversized tool-call arguments and too many tool
calls. Each time: one line naming the size and the bound, the workflow still RUNNING
(not terminated), its history far below Temporal's limits, and a normal reply to the
next message.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from parley.activities.model_calls import _model_failure
from parley.activities.reply_limits import merged
from parley.activities.streaming import ReplyStreamer
from parley.client import Conversations
from parley.contracts import STREAM_DELTA_SIGNAL, StreamDelta
from parley.contracts.errors import ErrorType
from parley.contracts.limits import (
    CALL_ID_MAX_CHARS,
    FAILURE_MESSAGE_MAX_CHARS,
    MODEL_TOOL_CALLS_PER_REPLY,
    STREAM_BATCH_MAX_BYTES,
    STREAM_BYTES_PER_CALL,
    utf8_size,
)
from parley.contracts.names import STREAM_DISCARDED_EVENT
from tests.support import registry
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway, sse_events
from tests.support.openai_env import THIRTY_WORDS, openai_model, serving_openai, stored_reply
from tests.support.openai_fake import FakeOpenAI
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

KEY = "sk-reply-limits-0000"
ALICE = auth(ALICE_TOKEN)
KB = 1024
MB = 1024 * KB
#: Far below what Temporal terminates a run at (50 MB).
HISTORY_CEILING = 4 * MB
#: A smaller bound, so the tests stream and send little.
SMALL = 64 * KB


def pieces(count: int, size: int) -> str:
    """``count`` words of ``size`` characters: the fake streams one word per delta."""
    return "".join(" " + "x" * (size - 1) for _ in range(count))


def not_streaming(model: Any) -> Any:
    """The worker's model asking for whole replies (``stream`` off on the wire)."""
    return model.model_copy(update={"disable_streaming": True})


async def read_turn(http: httpx.AsyncClient, sid: str, text: str) -> list[Any]:
    """POST a message through the gateway and read its SSE turn to the end."""
    seen = []
    async with http.stream(
        "POST",
        f"/v1/conversations/{sid}/messages",
        json={"text": text},
        headers={**ALICE, "Accept": "text/event-stream"},
    ) as stream:
        assert stream.status_code == 200, await stream.aread()
        async for event in sse_events(stream):
            seen.append(event)
            if event.type in ("RUN_FINISHED", "RUN_ERROR"):
                break
    return seen


async def history(conv: Conversations, sid: str) -> tuple[Any, list[Any]]:
    handle = conv.handle(sid)
    description = await handle.describe()
    events = [e async for e in handle.fetch_history_events()]
    return description, events


def streamed_bytes(events: list[Any]) -> list[int]:
    """The size of each ``stream_delta`` signal in a run's history."""
    return [
        e.ByteSize()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == STREAM_DELTA_SIGNAL
    ]


async def assert_still_running_and_small(conv: Conversations, sid: str) -> list[Any]:
    description, events = await history(conv, sid)
    assert description.status == WorkflowExecutionStatus.RUNNING
    size = description.raw_description.workflow_execution_info.history_size_bytes
    assert size < HISTORY_CEILING, f"{size:,} bytes of history"
    return events


async def assert_next_message_is_answered(
    conv: Conversations, sid: str, fake: FakeOpenAI, humans: int
) -> None:
    """The next message gets a normal reply, and what the provider was sent is a valid
    transcript: the user's messages, none of the refused replies."""
    fake.reply("Here is a short answer.")
    turn = await conv.send(sid, "alice", "a short answer, please")
    assert turn.status == "completed", turn
    assert turn.reply == "Here is a short answer."
    sent = fake.last_request.body["messages"]
    assert [m["role"] for m in sent] == ["user"] * humans
    assert max(len(str(m.get("content"))) for m in sent) < 100


def one_line(error: str | None) -> str:
    assert error and "\n" not in error and len(error) < 500, error
    return error


async def test_a_normal_streamed_reply_streams_and_is_kept_whole(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(THIRTY_WORDS, chunk_delay=0.05)
        sid = new_session()
        async with (
            parley_worker(registry(), openai_model(), max_model_reply_bytes=SMALL) as conv,
            serve_gateway(conv) as url,
            httpx.AsyncClient(base_url=url, timeout=120) as http,
        ):
            seen = await read_turn(http, sid, "talk to me")
            snapshot = await conv.state(sid, "alice")
            events = await assert_still_running_and_small(conv, sid)

    assert seen[-1].type == "RUN_FINISHED"
    deltas = [e.data["delta"] for e in seen if e.type == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) > 1  # streamed, not whole
    assert "".join(deltas) == stored_reply(snapshot).content == THIRTY_WORDS
    assert streamed_bytes(events)


async def test_the_reported_stream_fails_each_turn_in_one_line_and_the_run_goes_on(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's endpoint, at the default bound: 200 pieces of 120 KB in each of 3
    calls. Each call is cut off at 1 MiB; nothing past the streaming bound enters
    history; the provider's stream is closed, not read to its end."""
    text = pieces(200, 120_000)
    async with serving_openai(monkeypatch, KEY) as fake:
        sid = new_session()
        async with (
            parley_worker(registry(), openai_model()) as conv,
            serve_gateway(conv) as url,
            httpx.AsyncClient(base_url=url, timeout=120) as http,
        ):
            for n in range(3):
                fake.reply(text, chunk_delay=0.005)
                seen = await read_turn(http, sid, f"message {n}")
                error = seen[-1]
                assert error.type == "RUN_ERROR", seen[-3:]
                assert error.data["code"] == ErrorType.MODEL_REPLY_TOO_LARGE
                said = one_line(error.data["message"])
                assert "1,048,576 bytes" in said and "PARLEY_MAX_MODEL_REPLY_BYTES" in said
                # What it streamed (if a batch went out before the cut) is withdrawn.
                discarded = [e for e in seen if e.data.get("name") == STREAM_DISCARDED_EVENT]
                streamed = {e.data["messageId"] for e in seen if e.type == "TEXT_MESSAGE_START"}
                assert {e.data["value"]["messageId"] for e in discarded} == streamed
            for record in fake.streams:
                assert await asyncio.to_thread(record.done.wait, 60)
                assert not record.completed, "the provider's stream was read to its end"
                assert len(record.text_deltas) < 200
            events = await assert_still_running_and_small(conv, sid)
            signals = streamed_bytes(events)
            assert max(signals) < STREAM_BATCH_MAX_BYTES + 2 * KB
            assert sum(signals) < 3 * (STREAM_BYTES_PER_CALL + 64 * KB)
            snapshot = await conv.state(sid, "alice")
            assert not [m for m in snapshot.transcript if isinstance(m, AIMessage)]
            await assert_next_message_is_answered(conv, sid, fake, humans=4)


async def test_an_oversized_stream_under_a_smaller_bound(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(pieces(40, 8 * KB), chunk_delay=0.01)
        sid = new_session()
        async with parley_worker(registry(), openai_model(), max_model_reply_bytes=SMALL) as conv:
            turn = await conv.send(sid, "alice", "a long one")
            assert turn.status == "failed"
            said = one_line(turn.error)
            assert said.startswith("the model call failed: the model's reply passed 65,536 bytes")
            await assert_still_running_and_small(conv, sid)
            await assert_next_message_is_answered(conv, sid, fake, humans=2)


async def test_an_oversized_reply_that_is_not_streamed_fails_in_one_line(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply("y" * (200 * KB))
        sid = new_session()
        model = not_streaming(openai_model())
        async with parley_worker(registry(), model, max_model_reply_bytes=SMALL) as conv:
            turn = await conv.send(sid, "alice", "a long one, whole")
            assert not fake.chat_requests[0].body.get("stream")
            assert turn.status == "failed"
            said = one_line(turn.error)
            assert "over the 65,536 bytes one model call may return" in said, said
            assert "PARLEY_MAX_MODEL_REPLY_BYTES" in said
            events = await assert_still_running_and_small(conv, sid)
            assert not streamed_bytes(events)
            await assert_next_message_is_answered(conv, sid, fake, humans=2)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_oversized_tool_call_arguments_fail_in_one_line(
    parley_worker, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    big = {"name": "write_record", "id": "c1", "args": {"title": "t" * (100 * KB)}}
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(tool_calls=[big])
        sid = new_session()
        model = openai_model() if streamed else not_streaming(openai_model())
        async with parley_worker(registry(), model, max_model_reply_bytes=SMALL) as conv:
            turn = await conv.send(sid, "alice", "write it")
            assert turn.status == "failed" and not turn.pending
            one_line(turn.error)
            assert "65,536 bytes" in (turn.error or "")
            await assert_still_running_and_small(conv, sid)
            await assert_next_message_is_answered(conv, sid, fake, humans=2)


async def test_a_10_mb_tool_call_argument_at_the_default_bound(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider sends it whole (10 MB of JSON); the reply is refused once read,
    before anything of it is stored or proposed."""
    big = {"name": "write_record", "id": "c1", "args": {"title": "t" * (10 * MB)}}
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(tool_calls=[big])
        sid = new_session()
        async with parley_worker(registry(), not_streaming(openai_model())) as conv:
            turn = await conv.send(sid, "alice", "write it")
            assert turn.status == "failed" and not turn.pending
            said = one_line(turn.error)
            assert "over the 1,048,576 bytes one model call may return" in said, said
            await assert_still_running_and_small(conv, sid)
            await assert_next_message_is_answered(conv, sid, fake, humans=2)


async def test_a_reply_with_too_many_tool_calls_fails_in_one_line(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = MODEL_TOOL_CALLS_PER_REPLY + 1
    calls = [{"name": "read_records", "args": {}, "id": f"c{i}"} for i in range(count)]
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(tool_calls=calls)
        sid = new_session()
        async with parley_worker(registry(), openai_model()) as conv:
            turn = await conv.send(sid, "alice", "read everything")
            assert turn.status == "failed" and not turn.results
            said = one_line(turn.error)
            assert f"proposed {count} tool calls in one reply" in said
            assert f"at most {MODEL_TOOL_CALLS_PER_REPLY}" in said
            assert runs_in(sid, "read_records") == []
            # The provider billed the refused reply: its tokens count all the same.
            (billed,) = fake.usage_reported
            state = await conv.state(sid, "alice")
            assert state.usage.total_tokens == billed["total_tokens"] > 0
            assert state.usage.model_calls == 1
            await assert_still_running_and_small(conv, sid)
            await assert_next_message_is_answered(conv, sid, fake, humans=2)


async def test_the_workflow_refuses_a_stream_batch_past_the_bound(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``stream_delta`` that ``call_model`` never sends (over the batch bound, from an
    older build or any Temporal client) is not written into the event log; a small one
    sent the same way is (then withdrawn when the real reply streams)."""
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(THIRTY_WORDS, chunk_delay=0.2)
        sid = new_session()
        async with parley_worker(registry(), openai_model()) as conv:
            turn = asyncio.create_task(conv.send(sid, "alice", "talk to me"))
            await eventually(lambda: fake.streams, 60, "the model call started")
            handle = conv.handle(sid)
            big = StreamDelta(message_id="msg-big", sequence=1, text="z" * (64 * KB))
            small = StreamDelta(message_id="msg-small", sequence=1, text="hello")
            await handle.signal(STREAM_DELTA_SIGNAL, big)
            await handle.signal(STREAM_DELTA_SIGNAL, small)
            assert (await turn).status == "completed"
            log = [e.event for e in (await conv.events(sid, "alice")).events]

    ids = {e.get("messageId") for e in log} | {
        (e.get("value") or {}).get("messageId") for e in log if e["type"] == "CUSTOM"
    }
    assert "msg-small" in ids and "msg-big" not in ids
    assert max(len(e.get("delta", "")) for e in log) < 64 * KB


async def test_the_streamer_never_sends_a_batch_past_the_bounds() -> None:
    """``ReplyStreamer`` alone: a reply of 600 KB (multi-byte characters among them)
    goes out in batches of at most 16 KiB, 256 KiB in all, each the next part of the
    text."""
    sent: list[StreamDelta] = []

    async def send(delta: StreamDelta) -> None:
        sent.append(delta)

    text = ("ascii " * 10 + "é😀" * 7) * 6_000
    async with ReplyStreamer(send, "msg-1", first_batch=0, batch=0) as streamer:
        streamer.update(text)
        await eventually(
            lambda: sum(utf8_size(d.text) for d in sent) > STREAM_BYTES_PER_CALL - 4,
            60,
            "the call's streaming was spent",
        )
    assert all(utf8_size(d.text) <= STREAM_BATCH_MAX_BYTES for d in sent)
    assert sum(utf8_size(d.text) for d in sent) <= STREAM_BYTES_PER_CALL
    assert [d.sequence for d in sent] == list(range(1, len(sent) + 1))
    assert text.startswith("".join(d.text for d in sent))


async def test_a_provider_call_id_of_kilobytes_is_replaced_by_parleys_own(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Call ids live in the pending calls, the audit log and the tool's idempotency key:
    a provider's id past ``CALL_ID_MAX_CHARS`` is not kept."""
    long_id = "call_" + "q" * 5_000
    call = {"name": "write_record", "id": long_id, "args": {"title": "Q1"}}
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(tool_calls=[call])
        sid = new_session()
        async with parley_worker(registry(), openai_model()) as conv:
            turn = await conv.send(sid, "alice", "write Q1")
    assert turn.status == "awaiting_approval"
    (pending,) = turn.pending
    assert pending.tool_call_id != long_id and len(pending.tool_call_id) <= CALL_ID_MAX_CHARS


async def test_pieces_merge_as_langchain_adds_them_in_linear_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``merged`` gives the message LangChain's pairwise ``+`` gives (text, two tool
    calls, usage), and makes 20,000 pieces of one argument one message (the time is
    printed: pairwise, 8,000 pieces took a minute; this is linear)."""
    calls = [
        {"name": "write_record", "args": {"title": "xyz" * 50}, "id": "c1"},
        {"name": "read_records", "args": {"q": [1, 2, 3]}, "id": "c2"},
    ]
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply("a few words first", tool_calls=calls)
        fake.reply(tool_calls=[{"name": "write_record", "args": {"title": "q" * 160_000}}])
        model = openai_model()
        pieces = [piece async for piece in model.astream("hello")]
        many = [piece async for piece in model.astream("hello")]
    added = pieces[0]
    for piece in pieces[1:]:
        added = added + piece
    assert merged(pieces).model_dump() == added.model_dump()
    assert len(many) > 20_000
    started = time.monotonic()
    whole = merged(many)
    assert whole.tool_calls[0]["args"]["title"] == "q" * 160_000
    print(f"merged {len(many):,} pieces in {time.monotonic() - started:.2f} s")


def test_a_model_failure_of_megabytes_is_cut() -> None:
    """A failure's message goes into history as is (not to the store): a model whose
    error holds megabytes of text fails in a few kilobytes."""
    failure = _model_failure(RuntimeError("boom " * 1_000_000))
    assert len(failure.message) < FAILURE_MESSAGE_MAX_CHARS + 100
    assert failure.message.endswith("characters in all]")
    assert failure.non_retryable
