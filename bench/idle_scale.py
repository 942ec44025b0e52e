"""Idle scale: many conversations waiting for approval on one worker, Parley against bare.

N conversations per side (``--conversations``, default 10,000) are started and left
awaiting approval: Parley with ``Conversations.send`` (update-with-start; the model
proposes one ``confirm`` call, which stays pending), the bare workflow
(``bench/bare_workflow.py``) with its ``send`` update-with-start (it waits on
``approve``). Each side's worker runs in its own subprocess (``bench/_worker.py``,
SDK-default capacity: 1,000 cached workflows), so its RSS is its own. Measured:

- **start rate**: conversations reaching "awaiting approval" per second, with
  ``--concurrency`` sends in flight (50). Starts go in batches of ``--batch`` (500),
  alternating sides (Parley, bare, Parley, ...), so the noise of the 2-core machine and
  of anything else running hits both; a batch's rate is its size over its wall time,
  and the figure is the median batch.
- **worker RSS** (``VmRSS`` of the worker process) once every conversation waits,
  after a short pause; and before the first start.
- **decide latency**: ``--decisions`` (200) approvals, one at a time, alternating
  sides, each on a random waiting conversation while the rest keep waiting; the wall
  time of ``Conversations.decide`` / the bare ``approve`` update (the tool runs and the
  model replies). With 10,000 conversations and 1,000 cached, most of them replay.

Run from the repository root (the full size takes ~15-25 minutes on 2 cores):
    .venv/bin/python bench/idle_scale.py [--conversations 10000] [--json PATH]

Ends with:
    idle scale start rate: parley p50=NN/s bare p50=NN/s ratio=X.XX (target >= 0.8)
    idle scale worker RSS: parley=NNN MB bare=NNN MB ratio=X.XX (target: parley <= 500 MB)
    idle scale decide latency: parley p95=NNN ms bare p95=NNN ms ratio=X.XX
        (target: parley p95 <= 250 ms)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as h  # noqa: E402
from parley.client import Conversations  # noqa: E402

START_RATE_TARGET = 0.8
RSS_TARGET_MB = 500
DECIDE_P95_TARGET_MS = 250


async def run_batch(
    start_one: Callable[[], Awaitable[tuple[str, str]]], count: int, concurrency: int
) -> tuple[float, list[tuple[str, str]]]:
    """Start ``count`` conversations with ``concurrency`` in flight; wall seconds and
    the (conversation, pending call) pairs."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> tuple[str, str]:
        async with gate:
            return await start_one()

    began = time.perf_counter()
    started = await asyncio.gather(*(one() for _ in range(count)))
    return time.perf_counter() - began, list(started)


async def measure(args: argparse.Namespace, store_dir: str) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    settings = h.bench_settings(f"idle-parley-{tag}", store_dir, worker_wait_seconds=60.0)
    bare_queue = f"idle-bare-{tag}"
    converter, _ = h.data_converter(settings)
    env = await h.start_dev_server(converter)
    try:
        client = env.client
        conversations = Conversations(client, settings)
        specs = [("parley", settings.task_queue), ("bare", bare_queue)]
        async with h.worker_processes(specs, h.server_address(env), store_dir) as workers:
            parley_worker, bare_worker = workers
            await asyncio.sleep(2)
            rss_before = {"parley": parley_worker.rss_mb(), "bare": bare_worker.rss_mb()}
            print(
                f"worker RSS before: parley {rss_before['parley']:.0f} MB,"
                f" bare {rss_before['bare']:.0f} MB",
                flush=True,
            )

            async def parley_start() -> tuple[str, str]:
                session = h.new_session("idle-p")
                return session, await h.parley_send(conversations, session)

            async def bare_start() -> tuple[str, str]:
                workflow_id = h.new_session("idle-b")
                return workflow_id, await h.bare_send(client, bare_queue, workflow_id)

            waiting: dict[str, list[tuple[str, str]]] = {"parley": [], "bare": []}
            rates: dict[str, list[float]] = {"parley": [], "bare": []}
            seconds: dict[str, float] = {"parley": 0.0, "bare": 0.0}
            began = time.perf_counter()
            left = args.conversations
            while left > 0:
                count = min(args.batch, left)
                for side, start_one in (("parley", parley_start), ("bare", bare_start)):
                    took, started = await run_batch(start_one, count, args.concurrency)
                    waiting[side].extend(started)
                    rates[side].append(count / took)
                    seconds[side] += took
                left -= count
                print(
                    f"{len(waiting['parley']):>6} waiting per side: batch rate parley"
                    f" {rates['parley'][-1]:6.1f}/s bare {rates['bare'][-1]:6.1f}/s;"
                    f" RSS parley {parley_worker.rss_mb():.0f} MB bare"
                    f" {bare_worker.rss_mb():.0f} MB ({time.perf_counter() - began:.0f} s)",
                    flush=True,
                )
            await asyncio.sleep(5)
            rss_after = {"parley": parley_worker.rss_mb(), "bare": bare_worker.rss_mb()}
            print(
                f"worker RSS with {args.conversations} waiting: parley"
                f" {rss_after['parley']:.0f} MB, bare {rss_after['bare']:.0f} MB",
                flush=True,
            )

            rng = random.Random(args.seed)
            picks = {side: rng.sample(waiting[side], args.decisions) for side in waiting}
            latency: dict[str, list[float]] = {"parley": [], "bare": []}
            for i in range(args.decisions):
                session, call = picks["parley"][i]
                began = time.perf_counter()
                await h.parley_decide(conversations, session, call)
                latency["parley"].append((time.perf_counter() - began) * 1000)
                workflow_id, call = picks["bare"][i]
                began = time.perf_counter()
                await h.bare_decide(client, workflow_id, call)
                latency["bare"].append((time.perf_counter() - began) * 1000)
            rss_end = {"parley": parley_worker.rss_mb(), "bare": bare_worker.rss_mb()}
    finally:
        await env.shutdown()

    def stats(values: list[float]) -> dict[str, float]:
        return {
            "p50": statistics.median(values),
            "p95": h.percentile(values, 95),
            "max": max(values),
        }

    return {
        "conversations": args.conversations,
        "concurrency": args.concurrency,
        "batch": args.batch,
        "decisions": args.decisions,
        "code": h.git_revision(),
        "start_rate_per_s": {
            side: {
                "batch_p50": statistics.median(rates[side]),
                "overall": args.conversations / seconds[side],
                "batches": rates[side],
            }
            for side in rates
        },
        "rss_mb": {"before": rss_before, "all_waiting": rss_after, "after_decisions": rss_end},
        "decide_ms": {side: stats(latency[side]) for side in latency},
        "decide_ms_all": latency,
    }


def report(numbers: dict[str, Any]) -> None:
    rate, rss, decide = numbers["start_rate_per_s"], numbers["rss_mb"], numbers["decide_ms"]
    print()
    print(
        f"code: {numbers['code']}; conversations per side: {numbers['conversations']};"
        f" {numbers['concurrency']} sends in flight, batches of {numbers['batch']}"
    )
    for side in ("parley", "bare"):
        print(
            f"{side:>6}: start rate batch p50 {rate[side]['batch_p50']:.1f}/s, overall"
            f" {rate[side]['overall']:.1f}/s; RSS {rss['before'][side]:.0f} MB before,"
            f" {rss['all_waiting'][side]:.0f} MB all waiting,"
            f" {rss['after_decisions'][side]:.0f} MB after the decisions; decide"
            f" p50 {decide[side]['p50']:.0f} ms p95 {decide[side]['p95']:.0f} ms"
            f" max {decide[side]['max']:.0f} ms"
        )
    p_rate, b_rate = rate["parley"]["batch_p50"], rate["bare"]["batch_p50"]
    p_rss, b_rss = rss["all_waiting"]["parley"], rss["all_waiting"]["bare"]
    p_dec, b_dec = decide["parley"]["p95"], decide["bare"]["p95"]
    print(
        f"idle scale worker RSS: parley={p_rss:.0f} MB bare={b_rss:.0f} MB"
        f" ratio={p_rss / b_rss:.2f} (target: parley <= {RSS_TARGET_MB} MB)"
    )
    print(
        f"idle scale decide latency: parley p95={p_dec:.0f} ms bare p95={b_dec:.0f} ms"
        f" ratio={p_dec / b_dec:.2f} (target: parley p95 <= {DECIDE_P95_TARGET_MS} ms)"
    )
    print(
        f"idle scale start rate: parley p50={p_rate:.1f}/s bare p50={b_rate:.1f}/s"
        f" ratio={p_rate / b_rate:.2f} (target >= {START_RATE_TARGET})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=10_000, help="per side (10,000)")
    parser.add_argument("--concurrency", type=int, default=50, help="sends in flight (50)")
    parser.add_argument("--batch", type=int, default=500, help="starts per batch (500)")
    parser.add_argument("--decisions", type=int, default=200, help="per side (200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if args.conversations < 1 or args.concurrency < 1 or args.batch < 1:
        parser.error("--conversations, --concurrency and --batch must be at least 1")
    args.decisions = min(args.decisions, args.conversations)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as store_dir:
        numbers = asyncio.run(measure(args, store_dir))
    numbers["seconds"] = time.monotonic() - began
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    print(f"({numbers['seconds']:.0f} s)")
    report(numbers)


if __name__ == "__main__":
    main()
