"""Token streaming (issue 21, point 1): how soon a streamed reply's first text reaches
an SSE client, and what streaming costs in history. Client side (it runs a worker and
the gateway in this process, and reads the workflow's history).

Two sides, one dev server, interleaved turn by turn:

- **streamed**: the real ``langchain-openai`` client against ``FakeOpenAI``
  (tests/support/openai_fake.py), a local server speaking the OpenAI protocol that
  writes the reply word by word (``--words`` words, ``--word-ms`` apart);
- **whole**: a scripted model (it cannot stream) that gives the same reply at once.

Each turn is a message POSTed to the real gateway with ``Accept: text/event-stream``
and read to ``RUN_FINISHED``. Measured:

- the streamed side's **first-delta latency**: from the provider writing its first word
  (``StreamRecord.delta_times[0]``) to the SSE client reading the first
  ``TEXT_MESSAGE_CONTENT`` (both ``time.monotonic()`` in this process), p50 and p95, for
  the second turn of each conversation (the first turn, which starts the conversation,
  is reported apart);
- **history bytes per turn** on each side: the bytes of the events the conversation's
  second turn added (``bench/history_bytes.py``'s measure; the first turn carries the
  start), and the streamed side's ``stream_delta`` signals per turn.

Prints two lines at the end:

    first delta after the provider's first word: p50=NN ms p95=NN ms (target <= 100 ms added)
    history bytes per turn: streamed p50=NNNN whole p50=NNNN ratio=X.XX (signals/turn NN)

Run from the repository root:
    .venv/bin/python bench/streaming.py [--rounds N] [--words N] [--word-ms N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench`, `tests` importable
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402

from bench._harness import (  # noqa: E402
    bench_settings,
    data_converter,
    git_revision,
    percentile,
    start_dev_server,
)
from bench.history_bytes import measure, settled_history  # noqa: E402
from parley.activities.models.openai_provider import build_openai_model  # noqa: E402
from parley.client import Conversations  # noqa: E402
from parley.config.settings import Settings  # noqa: E402
from parley.tools import ToolRegistry  # noqa: E402
from parley.tools.loading import ModelConfig  # noqa: E402
from parley.worker.wiring import build_worker  # noqa: E402
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway, sse_events  # noqa: E402
from tests.support.openai_fake import FakeOpenAI  # noqa: E402
from tests.support.scripts import script  # noqa: E402

KEY = "sk-bench-streaming-0000"
TURNS = 2  # per conversation: the second turn is measured (the first carries the start)
TARGET_ADDED_MS = 100


async def sse_turn(http: httpx.AsyncClient, session: str) -> tuple[float | None, str]:
    """POST a message and read its SSE turn; when the first text delta came, and the
    turn's text."""
    first: float | None = None
    text = ""
    async with http.stream(
        "POST",
        f"/v1/conversations/{session}/messages",
        json={"text": "talk to me"},
        headers={**auth(ALICE_TOKEN), "Accept": "text/event-stream"},
    ) as stream:
        if stream.status_code != 200:
            raise RuntimeError(f"POST answered {stream.status_code}: {await stream.aread()!r}")
        async for event in sse_events(stream):
            if event.type == "TEXT_MESSAGE_CONTENT":
                first = first or time.monotonic()
                text += event.data["delta"]
            if event.type == "RUN_ERROR":
                raise RuntimeError(f"the turn failed: {event.data}")
            if event.type == "RUN_FINISHED":
                break
    return first, text


def signals(events: list[HistoryEvent]) -> int:
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in events)


async def one_conversation(
    http: httpx.AsyncClient, conversations: Conversations, reply: str
) -> tuple[list[float | None], int, int]:
    """TURNS turns in a new conversation; each turn's first-delta time, and the history
    bytes and signals its last turn added."""
    session = f"bench-stream-{uuid.uuid4().hex[:10]}"
    handle = conversations.handle(session)
    firsts: list[float | None] = []
    ends: list[int] = []
    try:
        for _ in range(TURNS):
            first, text = await sse_turn(http, session)
            if text != reply:
                raise RuntimeError(f"the deltas do not add up to the reply: {text!r}")
            firsts.append(first)
            events = await settled_history(handle)
            ends.append(len(events))
        last = events[ends[-2] : ends[-1]]
        return firsts, measure(last).bytes, signals(last)
    finally:
        await handle.terminate(reason="benchmark round measured")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    reply = " ".join(f"word{i}" for i in range(args.words)) + "."
    store = tempfile.mkdtemp(prefix="parley-bench-streaming-")
    async with FakeOpenAI(api_key=KEY) as provider:
        os.environ["OPENAI_BASE_URL"] = provider.base_url
        os.environ["OPENAI_API_KEY"] = KEY
        streamed_settings = bench_settings(f"bench-streamed-{uuid.uuid4().hex[:6]}", store)
        whole_settings = bench_settings(f"bench-whole-{uuid.uuid4().hex[:6]}", store)
        converter, _ = data_converter(streamed_settings)
        env = await start_dev_server(converter)
        try:
            client = env.client
            streamed_model = build_openai_model(
                ModelConfig.from_settings(Settings.from_env(), "gpt-bench")
            )
            whole_model = script(*[{"content": reply}] * (args.rounds * TURNS))
            streamed_worker = build_worker(
                client, streamed_settings, registry=ToolRegistry([]), model=streamed_model
            )
            whole_worker = build_worker(
                client, whole_settings, registry=ToolRegistry([]), model=whole_model
            )
            streamed_side = Conversations(client, streamed_settings)
            whole_side = Conversations(client, whole_settings)
            latencies_ms: list[float] = []  # turns of a running conversation
            starting_ms: list[float] = []  # the turn that starts the conversation
            bytes_streamed: list[int] = []
            bytes_whole: list[int] = []
            signals_streamed: list[int] = []
            async with (
                streamed_worker,
                whole_worker,
                serve_gateway(streamed_side) as streamed_url,
                serve_gateway(whole_side) as whole_url,
                httpx.AsyncClient(base_url=streamed_url, timeout=120) as streamed_http,
                httpx.AsyncClient(base_url=whole_url, timeout=120) as whole_http,
            ):
                for index in range(args.rounds):
                    for _ in range(TURNS):
                        provider.reply(reply, chunk_delay=args.word_ms / 1000)
                    before = len(provider.streams)
                    firsts, size, sent = await one_conversation(streamed_http, streamed_side, reply)
                    records = provider.streams[before:]
                    for turn, (first, record) in enumerate(zip(firsts, records, strict=True)):
                        if first is None or not record.delta_times:
                            raise RuntimeError("a streamed turn brought no delta")
                        ms = (first - record.delta_times[0]) * 1000
                        (latencies_ms if turn else starting_ms).append(ms)
                    bytes_streamed.append(size)
                    signals_streamed.append(sent)
                    _, size, _ = await one_conversation(whole_http, whole_side, reply)
                    bytes_whole.append(size)
                    print(
                        f"round {index + 1}/{args.rounds}: first delta "
                        f"{starting_ms[-1]:.0f} ms (starting) {latencies_ms[-1]:.0f} ms (later); "
                        f"turn bytes streamed {bytes_streamed[-1]} whole {bytes_whole[-1]}",
                        flush=True,
                    )
        finally:
            await env.shutdown()
    streamed_p50 = statistics.median(bytes_streamed)
    whole_p50 = statistics.median(bytes_whole)
    return {
        "revision": git_revision(),
        "words": args.words,
        "word_ms": args.word_ms,
        "rounds": args.rounds,
        "first_delta_ms": {
            "p50": percentile(latencies_ms, 50),
            "p95": percentile(latencies_ms, 95),
            "max": max(latencies_ms),
            "samples": latencies_ms,
        },
        "first_delta_ms_starting_turn": {
            "p50": percentile(starting_ms, 50),
            "p95": percentile(starting_ms, 95),
            "samples": starting_ms,
        },
        "turn_bytes": {
            "streamed_p50": streamed_p50,
            "whole_p50": whole_p50,
            "ratio": streamed_p50 / whole_p50,
            "signals_per_turn_p50": statistics.median(signals_streamed),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="conversations per side")
    parser.add_argument("--words", type=int, default=30, help="words in the reply")
    parser.add_argument("--word-ms", type=int, default=50, help="ms between the words")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    latency, size = result["first_delta_ms"], result["turn_bytes"]
    starting = result["first_delta_ms_starting_turn"]
    print(f"revision {result['revision']}")
    print(
        f"first delta, the turn that starts the conversation: p50={starting['p50']:.0f} ms "
        f"p95={starting['p95']:.0f} ms"
    )
    print(
        f"first delta after the provider's first word: p50={latency['p50']:.0f} ms "
        f"p95={latency['p95']:.0f} ms (target <= {TARGET_ADDED_MS} ms added)"
    )
    print(
        f"history bytes per turn: streamed p50={size['streamed_p50']:.0f} "
        f"whole p50={size['whole_p50']:.0f} ratio={size['ratio']:.2f} "
        f"(signals/turn {size['signals_per_turn_p50']:.0f})"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
