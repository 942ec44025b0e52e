"""Confirmed-turn latency: Parley against a bare Temporal workflow.

A confirmed turn: message -> the model proposes one ``confirm`` call -> pending ->
approve -> the tool runs -> the model replies. Its latency is the client's wall time of
``send`` + ``decide`` (Parley: ``Conversations.send`` then ``Conversations.decide``;
bare: the ``send`` update-with-start then the ``approve`` update), model and tool
instant on both sides. Each side's worker runs in its own subprocess
(``bench/_worker.py``), both on one dev server; the client is this process.

Conversations of ``--turns-per-conversation`` turns (5); the turns are interleaved one
by one (Parley turn, bare turn, Parley turn, ...) so the noise of a 2-core machine hits
both sides alike. ``--warmup`` turns per side (3) are not counted. The first turn of a
conversation includes the workflow start; p50/p95 are over all measured turns, and
also given for first turns and later turns apart.

``--profile DIR`` runs both workers under ``py-spy record`` (raw collapsed stacks in
DIR; py-spy found on PATH, next to the interpreter or given with ``--py-spy``) and
prints the functions with the most samples in each worker, per turn. Sampling slows
the workers: take latency figures from a run without it.

Run from the repository root:
    .venv/bin/python bench/turn_latency.py [--turns 40] [--json PATH] [--profile DIR]

Ends with:
    turn latency: parley p50=NN.N ms bare p50=NN.N ms ratio=X.XX (target <= 1.15)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as h  # noqa: E402
from parley.client import Conversations  # noqa: E402

TARGET_RATIO = 1.15


def py_spy_path(given: str | None) -> str:
    found = given or shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy not found: pip install py-spy, or pass --py-spy PATH")
    return found


def start_py_spy(args: argparse.Namespace, worker: h.WorkerProcess) -> subprocess.Popen[bytes]:
    """``py-spy record`` attached to a worker (after the warm-up: no start-up in it)."""
    raw = args.profile / f"{worker.side}.txt"
    command = [py_spy_path(args.py_spy), "record", "-f", "raw", "-o", str(raw), "-r", "200"]
    command += ["--pid", str(worker.pid)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(args: argparse.Namespace, store_dir: str) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    settings = h.bench_settings(f"lat-parley-{tag}", store_dir)
    bare_queue = f"lat-bare-{tag}"
    converter, _ = h.data_converter(settings)
    env = await h.start_dev_server(converter)
    total_turns = args.turns + args.warmup
    latency: dict[str, list[tuple[int, float]]] = {"parley": [], "bare": []}
    try:
        client = env.client
        conversations = Conversations(client, settings)
        address = h.server_address(env)
        workers = []
        for side, queue in (("parley", settings.task_queue), ("bare", bare_queue)):
            worker = h.WorkerProcess(
                side, address, queue, store_dir, turns=args.turns_per_conversation
            )
            workers.append(await worker.ready())
        spies: list[subprocess.Popen[bytes]] = []
        try:
            session = workflow_id = ""
            for i in range(total_turns):
                turn_in_conversation = i % args.turns_per_conversation
                if i == args.warmup and args.profile:
                    spies = [start_py_spy(args, w) for w in workers]
                    await asyncio.sleep(1)
                if turn_in_conversation == 0:
                    session, workflow_id = h.new_session("lat-p"), h.new_session("lat-b")
                began = time.perf_counter()
                await h.parley_turn(conversations, session)
                parley_ms = (time.perf_counter() - began) * 1000
                began = time.perf_counter()
                await h.bare_turn(client, bare_queue, workflow_id)
                bare_ms = (time.perf_counter() - began) * 1000
                if i >= args.warmup:
                    latency["parley"].append((turn_in_conversation, parley_ms))
                    latency["bare"].append((turn_in_conversation, bare_ms))
                    print(
                        f"turn {i - args.warmup + 1:>3} ({turn_in_conversation + 1} of its"
                        f" conversation): parley {parley_ms:6.1f} ms  bare {bare_ms:6.1f} ms",
                        flush=True,
                    )
        finally:
            for spy in spies:  # py-spy writes its profile on SIGINT
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            for worker in workers:
                worker.stop()
    finally:
        await env.shutdown()

    def stats(pairs: list[tuple[int, float]]) -> dict[str, Any]:
        values = [ms for _, ms in pairs]
        first = [ms for n, ms in pairs if n == 0]
        later = [ms for n, ms in pairs if n > 0]
        return {
            "p50_ms": statistics.median(values),
            "p95_ms": h.percentile(values, 95),
            "first_turn_p50_ms": statistics.median(first) if first else None,
            "later_turns_p50_ms": statistics.median(later) if later else None,
            "all_ms": values,
        }

    return {
        "turns": args.turns,
        "turns_per_conversation": args.turns_per_conversation,
        "warmup": args.warmup,
        "code": h.git_revision(),
        "profiled": bool(args.profile),
        "parley": stats(latency["parley"]),
        "bare": stats(latency["bare"]),
    }


#: Leaf frames of a thread waiting, not working (py-spy counts some of them as active).
IDLE_LEAVES = (
    "select (selectors.py:",
    "wait (threading.py:",
    "_worker (concurrent/futures/thread.py:81)",  # an idle pool thread: queue.get
)


def _package(frame: str) -> str:
    """``name (path/to/file.py:12)`` -> the file's package, two levels deep where it
    helps: ``temporalio/worker``, ``parley/workflows``, ``pydantic``, ``asyncio``..."""
    path = frame.rpartition("(")[2].rstrip(")").rpartition(":")[0]
    parts = path.split("/")
    if parts[0] in ("temporalio", "parley", "langchain_core") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else path


def profile_summary(raw: Path, top: int) -> dict[str, Any]:
    """From py-spy's raw collapsed stacks (idle stacks dropped): the frames with the
    most samples (inclusive, a frame counted once per stack), and the samples whose
    innermost frame is in each package (self time)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = idle = 0
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        if any(leaf in frames[-1] for leaf in IDLE_LEAVES):
            idle += n
            continue
        total += n
        own[_package(frames[-1])] += n
        for frame in set(frames):
            inclusive[frame] += n
    return {
        "busy_samples": total,
        "idle_samples": idle,
        "inclusive": inclusive.most_common(top),
        "self_by_package": own.most_common(top),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=40, help="measured turns per side (40)")
    parser.add_argument("--turns-per-conversation", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="uncounted turns per side (3)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--py-spy", default=None, metavar="PATH")
    parser.add_argument("--top", type=int, default=40, help="profile rows per side (40)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if args.turns < 1 or args.turns_per_conversation < 1:
        parser.error("--turns and --turns-per-conversation must be at least 1")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as store_dir:
        numbers = asyncio.run(measure(args, store_dir))
    numbers["seconds"] = time.monotonic() - began
    p, b = numbers["parley"], numbers["bare"]
    print()
    print(
        f"code: {numbers['code']}; {args.turns} turns per side (+{args.warmup} warm-up),"
        f" {args.turns_per_conversation} per conversation, interleaved"
        + ("; PROFILED (py-spy slows the workers)" if args.profile else "")
    )

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    for side, s in (("parley", p), ("bare", b)):
        print(
            f"{side:>6}: p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms; first turn of a"
            f" conversation p50 {ms(s['first_turn_p50_ms'])}, later turns p50"
            f" {ms(s['later_turns_p50_ms'])}"
        )
    if args.profile:
        numbers["profile"] = {}
        for side in ("parley", "bare"):
            summary = profile_summary(args.profile / f"{side}.txt", args.top)
            numbers["profile"][side] = summary
            per_turn = 1 / args.turns
            print()
            print(
                f"== {side} worker, py-spy at 200 Hz over the {args.turns} measured turns:"
                f" {summary['busy_samples'] * per_turn * 5:.1f} ms busy per turn"
                " (samples x 5 ms; idle stacks dropped)"
            )
            print("ms per turn in each package (innermost frame):")
            for package, n in summary["self_by_package"][:15]:
                print(f"{n * per_turn * 5:8.2f}  {package}")
            print("ms per turn in each frame and what it calls:")
            for frame, n in summary["inclusive"]:
                print(f"{n * per_turn * 5:8.2f}  {frame}")
    print(f"({numbers['seconds']:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    print(
        f"turn latency p95: parley={p['p95_ms']:.1f} ms bare={b['p95_ms']:.1f} ms"
        f" ratio={p['p95_ms'] / b['p95_ms']:.2f}"
    )
    print(
        f"turn latency: parley p50={p['p50_ms']:.1f} ms bare p50={b['p50_ms']:.1f} ms"
        f" ratio={p['p50_ms'] / b['p50_ms']:.2f} (target <= {TARGET_RATIO})"
    )


if __name__ == "__main__":
    main()
