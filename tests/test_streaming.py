"""Token streaming from the provider to an SSE client: a provider that streams its reply
word by word (the real ``langchain-openai`` client against a local server speaking the
OpenAI protocol with ``stream: true``), through the worker, the workflow's event log and
the real gateway.

What must hold: the text reaches the client while the provider still writes; it comes
as several deltas (a batch 20 ms after the first word, then 250 ms, 500 ms and one a
second after the one before); the deltas add up to the durable reply; a follower that reconnects
mid-reply by offset loses nothing and sees nothing twice; a retried model call never
interleaves its text with the failed attempt's.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from parley.contracts.names import STREAM_DISCARDED_EVENT
from tests.support import registry
from tests.support.gateway import ALICE_TOKEN, SseEvent, auth, serve_gateway, sse_events
from tests.support.openai_env import THIRTY_WORDS, openai_model, stored_reply
from tests.support.openai_fake import FakeOpenAI
from tests.support.streaming_models import FailsMidStream
from tests.support.transcripts import new_session

ALICE = auth(ALICE_TOKEN)
SSE = {"Accept": "text/event-stream"}


async def read_turn(http: httpx.AsyncClient, sid: str, text: str) -> list[tuple[float, SseEvent]]:
    """POST a message and read its SSE turn to the end, with each event's arrival time."""
    seen: list[tuple[float, SseEvent]] = []
    async with http.stream(
        "POST",
        f"/v1/conversations/{sid}/messages",
        json={"text": text},
        headers={**ALICE, **SSE},
    ) as stream:
        assert stream.status_code == 200, await stream.aread()
        async for event in sse_events(stream):
            seen.append((time.monotonic(), event))
            if event.type in ("RUN_FINISHED", "RUN_ERROR"):
                break
    return seen


async def test_a_streamed_reply_reaches_the_sse_client_while_the_provider_writes(
    parley_worker, fake: FakeOpenAI
) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.1)
    sid = new_session()
    async with (
        parley_worker(registry(), openai_model()) as conversations,
        serve_gateway(conversations) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        seen = await read_turn(http, sid, "talk to me")
        snapshot = await conversations.state(sid, "alice")

    (provider,) = fake.streams
    assert provider.completed and provider.text == THIRTY_WORDS
    contents = [(at, e) for at, e in seen if e.type == "TEXT_MESSAGE_CONTENT"]
    ends = [at for at, e in seen if e.type == "TEXT_MESSAGE_END"]
    first_delta_at = contents[0][0]
    assert first_delta_at < provider.delta_times[-1], "the first text came after the last word"
    # A 3 s reply: batches at about 0.02, 0.27, 0.77, 1.77 and 2.77 s.
    assert len([c for c in contents if c[0] < ends[0]]) >= 3
    reply = stored_reply(snapshot)
    assert "".join(e.data["delta"] for _, e in contents) == reply.content == THIRTY_WORDS
    assert {e.data["messageId"] for _, e in contents} == {reply.id}


async def test_a_follower_that_reconnects_mid_reply_loses_nothing_and_sees_nothing_twice(
    parley_worker, fake: FakeOpenAI
) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.1)
    sid = new_session()
    async with (
        parley_worker(registry(), openai_model()) as conversations,
        serve_gateway(conversations) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        turn = asyncio.create_task(conversations.send(sid, "alice", "talk to me"))
        first: list[SseEvent] = []
        async with http.stream("GET", f"/v1/conversations/{sid}/events", headers=ALICE) as s:
            async for event in sse_events(s):
                first.append(event)
                if sum(e.type == "TEXT_MESSAGE_CONTENT" for e in first) == 3:
                    break  # gone mid-reply
        rest: list[SseEvent] = []
        resume = {**ALICE, "Last-Event-ID": first[-1].id or ""}
        async with http.stream("GET", f"/v1/conversations/{sid}/events", headers=resume) as s:
            async for event in sse_events(s):
                rest.append(event)
                if event.type == "RUN_FINISHED":
                    break
        await turn
        snapshot = await conversations.state(sid, "alice")

    offsets = [int(e.id or -1) for e in first + rest]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # no gap, no repeat
    deltas = [e.data["delta"] for e in first + rest if e.type == "TEXT_MESSAGE_CONTENT"]
    assert "".join(deltas) == stored_reply(snapshot).content == THIRTY_WORDS


async def test_a_retried_model_call_streams_under_a_new_message_id_never_interleaved(
    parley_worker,
) -> None:
    model = FailsMidStream(text=THIRTY_WORDS, words_then_fail=12)
    sid = new_session()
    async with parley_worker(registry(), model) as conversations:
        await conversations.send(sid, "alice", "talk to me")
        events = [e.event for e in (await conversations.events(sid, "alice")).events]
        snapshot = await conversations.state(sid, "alice")

    assert model.calls == [1, 2]
    reply = stored_reply(snapshot)
    assert reply.content == THIRTY_WORDS
    discarded = [e for e in events if e["type"] == "CUSTOM" and e["name"] == STREAM_DISCARDED_EVENT]
    (first_attempt,) = {e["value"]["messageId"] for e in discarded}
    assert first_attempt != reply.id
    by_message: dict[str, list[str]] = {}
    order = []
    for event in events:
        if event["type"].startswith("TEXT_MESSAGE"):
            by_message.setdefault(event["messageId"], []).append(event["type"])
            order.append(event["messageId"])
    # each message starts, streams and ends once; the retry starts after the first ended
    for kinds in by_message.values():
        assert kinds[0] == "TEXT_MESSAGE_START" and kinds[-1] == "TEXT_MESSAGE_END"
        assert kinds.count("TEXT_MESSAGE_START") == kinds.count("TEXT_MESSAGE_END") == 1
    assert order.index(reply.id) > len(order) - 1 - order[::-1].index(first_attempt)
    text = {
        message: "".join(
            e["delta"]
            for e in events
            if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == message
        )
        for message in by_message
    }
    assert text[reply.id] == THIRTY_WORDS
    assert THIRTY_WORDS.startswith(text[first_attempt]) and text[first_attempt]
