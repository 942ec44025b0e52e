"""Throughput: confirmed turns per second with 50 concurrent conversations, Parley
against a bare Temporal workflow, with 1 worker and with 2 workers.

``--conversations`` conversations (50) run at once, each doing ``--turns`` confirmed
turns (4) one after the other (message -> pending -> approve -> reply; model and tool
instant). A phase is one side doing all of them; its throughput is turns over the
phase's wall time. Phases alternate (Parley, bare, Parley, bare, ...: ``--rounds`` (3)
of each per worker count) so that the noise of the 2-core machine hits both sides.
Each phase also reports the CPU time (``/proc/<pid>/stat``) per turn of the dev server
and of that side's worker processes: where a turn's cost goes, whatever the noise. The
end gives each as a ratio to bare (Parley's p50 over bare's), so that the cost is seen
apart from the CPU the machine shares with whatever else runs.

Workers are separate processes (``bench/_worker.py``), not Worker objects sharing this
process: two workers in one process would share one event loop and one GIL, which is
not what a second worker gives. Each side has its own task queue (fresh per worker
count), its workers polling it; the other side's workers sit idle meanwhile. With 2
workers, the two share the 2 cores with the dev server and this client, so expect
little gain: the figure is whether Parley keeps up with bare, not how either scales.

Run from the repository root:
    .venv/bin/python bench/throughput.py [--conversations 50] [--turns 4] [--rounds 3]
        [--workers 1 2] [--json PATH]

Ends with two lines per worker count:
    throughput 1 worker: parley p50=NN.N turns/s bare p50=NN.N turns/s ratio=X.XX (target >= 0.9)
    cpu per confirmed turn 1 worker: server X.XX x bare (NN vs NN ms), worker(s) X.XX x bare
        (NN vs NN ms)
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as h  # noqa: E402
from parley.client import Conversations  # noqa: E402

TARGET_RATIO = 0.9


async def phase(conversation: Callable[[], Awaitable[None]], count: int) -> float:
    """Run ``count`` conversations at once; wall seconds."""
    began = time.perf_counter()
    await asyncio.gather(*(conversation() for _ in range(count)))
    return time.perf_counter() - began


def ratios(sides: dict[str, Any]) -> dict[str, float]:
    """Parley over bare: throughput, and the dev server's and the workers' CPU per
    confirmed turn (each a ratio of the two sides' p50s)."""
    parley, bare = sides["parley"], sides["bare"]
    return {
        "throughput": parley["p50"] / bare["p50"],
        "server_cpu_per_turn": parley["server_cpu_ms_per_turn_p50"]
        / bare["server_cpu_ms_per_turn_p50"],
        "workers_cpu_per_turn": parley["workers_cpu_ms_per_turn_p50"]
        / bare["workers_cpu_ms_per_turn_p50"],
    }


def cpu_text(cpu: dict[str, list[float]]) -> str:
    return f"{cpu['server'][-1]:.0f} + {cpu['workers'][-1]:.0f}"


async def measure(args: argparse.Namespace, store_dir: str) -> dict[str, Any]:
    converter, _ = h.data_converter(h.bench_settings("unused", store_dir))
    env = await h.start_dev_server(converter)
    results: dict[str, Any] = {}
    try:
        client = env.client
        address = h.server_address(env)
        server = h.server_pid(env)
        for workers in args.workers:
            tag = uuid.uuid4().hex[:8]
            settings = h.bench_settings(f"tp-parley-{tag}", store_dir, worker_wait_seconds=120.0)
            bare_queue = f"tp-bare-{tag}"
            conversations = Conversations(client, settings)
            specs = [("parley", settings.task_queue)] * workers + [("bare", bare_queue)] * workers

            async def parley_conversation(conversations: Conversations = conversations) -> None:
                session = h.new_session("tp-p")
                for _ in range(args.turns):
                    await h.parley_turn(conversations, session)

            async def bare_conversation(bare_queue: str = bare_queue) -> None:
                workflow_id = h.new_session("tp-b")
                for _ in range(args.turns):
                    await h.bare_turn(client, bare_queue, workflow_id)

            rates: dict[str, list[float]] = {"parley": [], "bare": []}
            #: CPU ms per turn of the dev server and of the side's worker processes.
            cpu: dict[str, dict[str, list[float]]] = {
                side: {"server": [], "workers": []} for side in rates
            }
            async with h.worker_processes(specs, address, store_dir, turns=args.turns) as processes:
                # Warm-up: a few conversations per side, not counted.
                await phase(parley_conversation, 5)
                await phase(bare_conversation, 5)
                for i in range(args.rounds):
                    for side, conversation in (
                        ("parley", parley_conversation),
                        ("bare", bare_conversation),
                    ):
                        own = [p.pid for p in processes if p.side == side]
                        server_before = h.cpu_seconds(server)
                        workers_before = sum(h.cpu_seconds(pid) for pid in own)
                        took = await phase(conversation, args.conversations)
                        turns = args.conversations * args.turns
                        rates[side].append(turns / took)
                        cpu[side]["server"].append(
                            (h.cpu_seconds(server) - server_before) * 1000 / turns
                        )
                        cpu[side]["workers"].append(
                            (sum(h.cpu_seconds(pid) for pid in own) - workers_before) * 1000 / turns
                        )
                    print(
                        f"{workers} worker(s), round {i + 1}: parley"
                        f" {rates['parley'][-1]:6.1f} turns/s  bare {rates['bare'][-1]:6.1f}"
                        f" turns/s  (CPU ms per turn, server + workers: parley"
                        f" {cpu_text(cpu['parley'])}, bare {cpu_text(cpu['bare'])})",
                        flush=True,
                    )
            results[str(workers)] = {
                side: {
                    "p50": statistics.median(r),
                    "rounds": r,
                    "server_cpu_ms_per_turn_p50": statistics.median(cpu[side]["server"]),
                    "workers_cpu_ms_per_turn_p50": statistics.median(cpu[side]["workers"]),
                    "server_cpu_ms_per_turn": cpu[side]["server"],
                    "workers_cpu_ms_per_turn": cpu[side]["workers"],
                }
                for side, r in rates.items()
            }
            results[str(workers)]["ratios"] = ratios(results[str(workers)])
    finally:
        await env.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=50, help="at once (50)")
    parser.add_argument("--turns", type=int, default=4, help="turns per conversation (4)")
    parser.add_argument("--rounds", type=int, default=3, help="phases per side (3)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if min(args.conversations, args.turns, args.rounds, *args.workers) < 1:
        parser.error("sizes must be at least 1")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as store_dir:
        results = asyncio.run(measure(args, store_dir))
    numbers = {
        "conversations": args.conversations,
        "turns": args.turns,
        "rounds": args.rounds,
        "code": h.git_revision(),
        "workers": results,
        "seconds": time.monotonic() - began,
    }
    print()
    print(
        f"code: {numbers['code']}; {args.conversations} conversations at once x {args.turns}"
        f" turns, {args.rounds} phases per side, alternating; workers in subprocesses"
        f" ({numbers['seconds']:.0f} s)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    for workers, sides in results.items():
        for side in ("parley", "bare"):
            s = sides[side]
            print(
                f"{workers} worker(s), {side:>6}: p50 {s['p50']:.1f} turns/s; CPU per turn p50:"
                f" dev server {s['server_cpu_ms_per_turn_p50']:.0f} ms, worker(s)"
                f" {s['workers_cpu_ms_per_turn_p50']:.0f} ms"
            )
    for workers, sides in results.items():
        p, b = sides["parley"]["p50"], sides["bare"]["p50"]
        label = "1 worker" if workers == "1" else f"{workers} workers"
        print(
            f"throughput {label}: parley p50={p:.1f} turns/s bare p50={b:.1f} turns/s"
            f" ratio={p / b:.2f} (target >= {TARGET_RATIO})"
        )
        cpu_ratio = sides["ratios"]
        parley, bare = sides["parley"], sides["bare"]
        print(
            f"cpu per confirmed turn {label}: server {cpu_ratio['server_cpu_per_turn']:.2f} x"
            f" bare ({parley['server_cpu_ms_per_turn_p50']:.0f} vs"
            f" {bare['server_cpu_ms_per_turn_p50']:.0f} ms), worker(s)"
            f" {cpu_ratio['workers_cpu_per_turn']:.2f} x bare"
            f" ({parley['workers_cpu_ms_per_turn_p50']:.0f} vs"
            f" {bare['workers_cpu_ms_per_turn_p50']:.0f} ms)"
        )


if __name__ == "__main__":
    main()
