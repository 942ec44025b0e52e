"""Streaming by provider path (issue 35): the first-delta latency and the history bytes
of a streamed turn for each provider Parley speaks natively, side by side in one run.
Client side (it runs the workers and gateways in this process and reads the workflows'
histories).

Four sides, one dev server, interleaved round by round (as ``bench/streaming.py``):

- **openai**, **anthropic**, **google**: the real ``langchain-openai``,
  ``langchain-anthropic`` and ``langchain-google-genai`` clients against local servers
  speaking each provider's protocol (``tests/support/openai_fake.py``,
  ``anthropic_fake.py``, ``gemini_fake.py``), each writing the same reply word by word
  (``--words`` words, ``--word-ms`` apart);
- **whole**: a scripted model that gives the same reply at once (the baseline for bytes).

Per side: the first-delta latency of the second turn of each conversation (from the
provider writing its first word to the SSE client reading the first
``TEXT_MESSAGE_CONTENT``; the starting turn apart), and the bytes of history that turn
added. Prints one line per side.

Run from the repository root:
    .venv/bin/python bench/providers.py [--rounds N] [--words N] [--word-ms N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench`, `tests` importable
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench._harness import (  # noqa: E402
    bench_settings,
    data_converter,
    git_revision,
    percentile,
    start_dev_server,
)
from bench.streaming import TURNS, one_conversation  # noqa: E402
from parley.activities.models.anthropic_provider import build_anthropic_model  # noqa: E402
from parley.activities.models.google_provider import build_google_model  # noqa: E402
from parley.activities.models.openai_provider import build_openai_model  # noqa: E402
from parley.client import Conversations  # noqa: E402
from parley.tools import ToolRegistry  # noqa: E402
from parley.tools.loading import ModelConfig  # noqa: E402
from parley.worker.wiring import build_worker  # noqa: E402
from tests.support.anthropic_fake import FakeAnthropic  # noqa: E402
from tests.support.gateway import serve_gateway  # noqa: E402
from tests.support.gemini_fake import FakeGemini  # noqa: E402
from tests.support.openai_fake import FakeOpenAI  # noqa: E402
from tests.support.scripts import script  # noqa: E402

KEYS = {
    "openai": "sk-bench-providers-0000",
    "anthropic": "sk-ant-bench-providers-0000",
    "google": "AIzaBenchProviders000000000000000000000",
}
MODELS = {"openai": "gpt-bench", "anthropic": "claude-bench", "google": "gemini-bench"}
BUILDERS = {
    "openai": build_openai_model,
    "anthropic": build_anthropic_model,
    "google": build_google_model,
}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    reply = " ".join(f"word{i}" for i in range(args.words)) + "."
    store = tempfile.mkdtemp(prefix="parley-bench-providers-")
    with (
        FakeOpenAI(api_key=KEYS["openai"]) as openai,
        FakeAnthropic(api_key=KEYS["anthropic"]) as anthropic,
        FakeGemini(api_key=KEYS["google"]) as google,
    ):
        fakes: dict[str, Any] = {"openai": openai, "anthropic": anthropic, "google": google}
        settings = {
            side: bench_settings(f"bench-{side}-{uuid.uuid4().hex[:6]}", store)
            for side in [*fakes, "whole"]
        }
        converter, _ = data_converter(settings["whole"])
        env = await start_dev_server(converter)
        try:
            client = env.client
            models: dict[str, Any] = {
                side: BUILDERS[side](
                    ModelConfig(MODELS[side], api_key=KEYS[side], base_url=fake.base_url)
                )
                for side, fake in fakes.items()
            }
            models["whole"] = script(*[{"content": reply}] * (args.rounds * TURNS))
            latency: dict[str, list[float]] = {side: [] for side in fakes}
            starting: dict[str, list[float]] = {side: [] for side in fakes}
            turn_bytes: dict[str, list[int]] = {side: [] for side in settings}
            async with contextlib.AsyncExitStack() as stack:
                http: dict[str, httpx.AsyncClient] = {}
                sides: dict[str, Conversations] = {}
                for side, config in settings.items():
                    worker = build_worker(
                        client, config, registry=ToolRegistry([]), model=models[side]
                    )
                    await stack.enter_async_context(worker)
                    sides[side] = Conversations(client, config)
                    url = await stack.enter_async_context(serve_gateway(sides[side]))
                    http[side] = await stack.enter_async_context(
                        httpx.AsyncClient(base_url=url, timeout=120)
                    )
                for index in range(args.rounds):
                    for side in settings:
                        fake = fakes.get(side)
                        before = 0
                        if fake is not None:
                            for _ in range(TURNS):
                                fake.reply(reply, chunk_delay=args.word_ms / 1000)
                            before = len(fake.streams)
                        firsts, size, _ = await one_conversation(http[side], sides[side], reply)
                        turn_bytes[side].append(size)
                        if fake is None:
                            continue
                        records = fake.streams[before:]
                        for turn, (first, record) in enumerate(zip(firsts, records, strict=True)):
                            if first is None or not record.delta_times:
                                raise RuntimeError(f"a streamed {side} turn brought no delta")
                            ms = (first - record.delta_times[0]) * 1000
                            (latency[side] if turn else starting[side]).append(ms)
                    print(
                        f"round {index + 1}/{args.rounds}: "
                        + ", ".join(
                            f"{side} {latency[side][-1]:.0f} ms {turn_bytes[side][-1]} B"
                            for side in fakes
                        )
                        + f", whole {turn_bytes['whole'][-1]} B",
                        flush=True,
                    )
        finally:
            await env.shutdown()
    whole = statistics.median(turn_bytes["whole"])
    return {
        "revision": git_revision(),
        "words": args.words,
        "word_ms": args.word_ms,
        "rounds": args.rounds,
        "whole_turn_bytes_p50": whole,
        "sides": {
            side: {
                "first_delta_ms_p50": percentile(latency[side], 50),
                "first_delta_ms_p95": percentile(latency[side], 95),
                "first_delta_ms_starting_p50": percentile(starting[side], 50),
                "turn_bytes_p50": statistics.median(turn_bytes[side]),
                "bytes_ratio_to_whole": statistics.median(turn_bytes[side]) / whole,
            }
            for side in latency
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
    print(f"revision {result['revision']}; whole turn p50 {result['whole_turn_bytes_p50']:.0f} B")
    for side, figures in result["sides"].items():
        print(
            f"{side}: first delta p50={figures['first_delta_ms_p50']:.0f} ms "
            f"p95={figures['first_delta_ms_p95']:.0f} ms "
            f"(starting turn p50={figures['first_delta_ms_starting_p50']:.0f} ms); "
            f"streamed turn p50={figures['turn_bytes_p50']:.0f} B "
            f"= {figures['bytes_ratio_to_whole']:.2f}x whole"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
