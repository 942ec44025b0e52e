"""What traces cost (issue 23, point 3): confirmed turns on a worker that traces
against one that does not, side by side. Client side (it runs the workers as
subprocesses and an OTLP/HTTP receiver in this process).

Two Parley workers (``bench/_worker.py``) on one dev server: **traced** (tracing
configured as ``OTEL_EXPORTER_OTLP_ENDPOINT`` would, batched OTLP/HTTP export to
``tests/support/otlp.py``'s receiver on 127.0.0.1) and **plain**. A confirmed turn is
message -> pending -> approve -> tool -> reply (``bench/_harness.py``), model and tool
instant; the client here is not traced, so the workflow spans are the workers' own.
Turns are interleaved one by one (traced, plain, traced, ...) so the machine's noise
hits both alike; ``--warmup`` turns per side are not counted. Measured: the client's
wall time per turn (p50, p95) and each worker's CPU seconds per turn
(``/proc/<pid>/stat``), and the spans the receiver got per traced turn.

Run from the repository root:
    .venv/bin/python bench/tracing.py [--turns 40] [--json PATH]

Ends with:
    traces: latency p50 traced=NN.N ms plain=NN.N ms ratio=X.XX; CPU/turn traced=NN ms
    plain=NN ms ratio=X.XX; spans/turn NN
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as h  # noqa: E402
from parley.client import Conversations  # noqa: E402
from tests.support.otlp import OtlpReceiver  # noqa: E402

SIDES = ("traced", "plain")


async def measure(args: argparse.Namespace, store_dir: str) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    settings = {side: h.bench_settings(f"trace-{side}-{tag}", store_dir) for side in SIDES}
    converter, _ = h.data_converter(settings["plain"])
    env = await h.start_dev_server(converter)
    latency: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, float] = {}
    try:
        with OtlpReceiver() as receiver:
            address = h.server_address(env)
            extra = {"traced": ["--otlp-url", f"{receiver.endpoint}/v1/traces"], "plain": []}
            workers = {
                side: await h.WorkerProcess(
                    "parley",
                    address,
                    settings[side].task_queue,
                    store_dir,
                    turns=args.turns_per_conversation,
                    extra=extra[side],
                ).ready()
                for side in SIDES
            }
            conversations = {side: Conversations(env.client, settings[side]) for side in SIDES}
            sessions = dict.fromkeys(SIDES, "")
            cpu_before: dict[str, float] = {}
            spans_before = 0
            try:
                for i in range(args.turns + args.warmup):
                    if i == args.warmup:
                        cpu_before = {s: h.cpu_seconds(workers[s].pid) for s in SIDES}
                        spans_before = len(receiver.spans)
                    for side in SIDES:
                        if i % args.turns_per_conversation == 0:
                            sessions[side] = h.new_session(f"trace-{side[0]}")
                        began = time.perf_counter()
                        await h.parley_turn(conversations[side], sessions[side])
                        if i >= args.warmup:
                            latency[side].append((time.perf_counter() - began) * 1000)
                cpu = {s: h.cpu_seconds(workers[s].pid) - cpu_before[s] for s in SIDES}
                await asyncio.sleep(1)  # the batch processor's last export
                spans = len(receiver.spans) - spans_before
            finally:
                for worker in workers.values():
                    worker.stop()
    finally:
        await env.shutdown()
    return {
        "turns": args.turns,
        "code": h.git_revision(),
        **{
            side: {
                "p50_ms": statistics.median(latency[side]),
                "p95_ms": h.percentile(latency[side], 95),
                "cpu_ms_per_turn": cpu[side] * 1000 / args.turns,
            }
            for side in SIDES
        },
        "spans_per_turn": spans / args.turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--turns-per-conversation", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parley-bench-trace-") as store_dir:
        result = asyncio.run(measure(args, store_dir))
    traced, plain = result["traced"], result["plain"]
    for side in SIDES:
        r = result[side]
        print(
            f"{side:>6}: p50={r['p50_ms']:.1f} ms p95={r['p95_ms']:.1f} ms "
            f"CPU/turn={r['cpu_ms_per_turn']:.1f} ms"
        )
    print(
        f"traces: latency p50 traced={traced['p50_ms']:.1f} ms plain={plain['p50_ms']:.1f} ms "
        f"ratio={traced['p50_ms'] / plain['p50_ms']:.2f}; "
        f"CPU/turn traced={traced['cpu_ms_per_turn']:.1f} ms "
        f"plain={plain['cpu_ms_per_turn']:.1f} ms "
        f"ratio={traced['cpu_ms_per_turn'] / plain['cpu_ms_per_turn']:.2f}; "
        f"spans/turn {result['spans_per_turn']:.1f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
