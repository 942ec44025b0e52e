"""Recovery: a worker killed (SIGKILL) in the middle of a tool call; how long until the
turn completes on a restarted worker. Parley against a bare Temporal workflow.

Per round and side: a worker subprocess (``bench/_worker.py``) whose tool writes a
marker file and then runs for minutes (heartbeating every
``parley.contracts.HEARTBEAT_INTERVAL``, 3 s: Parley's ``run_tool`` does it around every
tool; the bare tool uses the same ``heartbeating()``). A fresh conversation sends its
message (-> pending call) and the user approves; once the tool has started, the script
waits ``--kill-after`` seconds (1), kills the worker with SIGKILL and at once starts a
new worker on the same task queue, whose tool is instant. Measured, from the kill:

- **tool retried**: when the tool starts again on the new worker (Temporal noticed the
  missing heartbeats: ``parley.contracts.HEARTBEAT_TIMEOUT``, 15 s, then the retry
  policy's first interval, 1 s);
- **turn completed**: when the client's ``decide`` / ``approve`` returns.

The bare workflow (``bench/bare_workflow.py``, started with ``tool_heartbeat_seconds``)
gives its tool the same heartbeat timeout and retry policy as Parley's
(``parley.contracts.TOOL_ACTIVITY``). Sides alternate round by round (Parley, bare, ...).

Run from the repository root (~25 s per round and side):
    .venv/bin/python bench/recovery.py [--rounds 3] [--kill-after 1] [--json PATH]

Ends with:
    recovery: parley p50=NN.N s bare p50=NN.N s ratio=X.XX (heartbeat timeout 15 s)
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
from parley.contracts import HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT  # noqa: E402

HEARTBEAT_SECONDS = HEARTBEAT_TIMEOUT.total_seconds()


async def wait_for_file(path: Path, within: float = 120) -> float:
    """Poll for ``path``; the wall time (``time.time()``) at which it was written."""
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(path.exists):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        await asyncio.sleep(0.02)
    return (await asyncio.to_thread(path.stat)).st_mtime


async def one_round(
    side: str,
    args: argparse.Namespace,
    address: str,
    store_dir: str,
    conversations: Conversations,
    scratch: Path,
) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    queue = conversations.settings.task_queue if side == "parley" else f"rec-bare-{tag}"
    first_marker, second_marker = scratch / f"{tag}-first", scratch / f"{tag}-second"
    doomed = h.WorkerProcess(
        side,
        address,
        queue,
        store_dir,
        extra=["--tool-delay", "600", "--tool-marker", str(first_marker)],
    )
    await doomed.ready()
    client = conversations.temporal
    session = h.new_session(f"rec-{side[0]}")
    if side == "parley":
        call = await h.parley_send(conversations, session)
        decided = asyncio.ensure_future(h.parley_decide(conversations, session, call))
    else:
        start = {"tool_heartbeat_seconds": HEARTBEAT_SECONDS}
        call = await h.bare_send(client, queue, session, start)
        decided = asyncio.ensure_future(h.bare_decide(client, session, call))
    replacement: h.WorkerProcess | None = None
    try:
        await wait_for_file(first_marker)
        await asyncio.sleep(args.kill_after)
        killed_at = time.time()
        doomed.kill()
        replacement = h.WorkerProcess(
            side, address, queue, store_dir, extra=["--tool-marker", str(second_marker)]
        )
        await replacement.ready()
        ready_at = time.time()
        await asyncio.wait_for(decided, timeout=300)
        done_at = time.time()
        retried_at = await wait_for_file(second_marker, within=5)
    finally:
        if not decided.done():
            decided.cancel()
        doomed.stop()
        if replacement is not None:
            replacement.stop()
    return {
        "new_worker_ready_s": ready_at - killed_at,
        "tool_retried_s": retried_at - killed_at,
        "turn_completed_s": done_at - killed_at,
    }


async def measure(args: argparse.Namespace, store_dir: str) -> dict[str, list[dict[str, float]]]:
    settings = h.bench_settings(
        f"rec-parley-{uuid.uuid4().hex[:8]}", store_dir, worker_wait_seconds=300.0
    )
    converter, _ = h.data_converter(settings)
    env = await h.start_dev_server(converter)
    rounds: dict[str, list[dict[str, float]]] = {"parley": [], "bare": []}
    try:
        conversations = Conversations(env.client, settings)
        address = h.server_address(env)
        with tempfile.TemporaryDirectory(prefix="parley-bench-recovery-") as scratch:
            for i in range(args.rounds):
                for side in ("parley", "bare"):
                    times = await one_round(
                        side, args, address, store_dir, conversations, Path(scratch)
                    )
                    rounds[side].append(times)
                    print(
                        f"round {i + 1} {side:>6}: new worker ready"
                        f" {times['new_worker_ready_s']:5.1f} s, tool retried"
                        f" {times['tool_retried_s']:5.1f} s, turn completed"
                        f" {times['turn_completed_s']:5.1f} s after the kill",
                        flush=True,
                    )
    finally:
        await env.shutdown()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side (3)")
    parser.add_argument(
        "--kill-after", type=float, default=1.0, help="seconds into the tool call (1)"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as store_dir:
        rounds = asyncio.run(measure(args, store_dir))

    def p50(side: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[side])

    numbers: dict[str, Any] = {
        "rounds": args.rounds,
        "kill_after_s": args.kill_after,
        "heartbeat_timeout_s": HEARTBEAT_SECONDS,
        "heartbeat_interval_s": HEARTBEAT_INTERVAL.total_seconds(),
        "code": h.git_revision(),
        "per_round": rounds,
        "p50": {
            side: {key: p50(side, key) for key in rounds[side][0]} for side in ("parley", "bare")
        },
        "seconds": time.monotonic() - began,
    }
    print()
    print(
        f"code: {numbers['code']}; {args.rounds} rounds per side, alternating; SIGKILL"
        f" {args.kill_after:g} s into the tool call; heartbeat every"
        f" {numbers['heartbeat_interval_s']:g} s, timeout {HEARTBEAT_SECONDS:g} s"
        f" ({numbers['seconds']:.0f} s)"
    )
    for side in ("parley", "bare"):
        s = numbers["p50"][side]
        print(
            f"{side:>6} p50: tool retried {s['tool_retried_s']:.1f} s, turn completed"
            f" {s['turn_completed_s']:.1f} s after the kill"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    p, b = numbers["p50"]["parley"], numbers["p50"]["bare"]
    print(
        f"recovery: parley p50={p['turn_completed_s']:.1f} s bare"
        f" p50={b['turn_completed_s']:.1f} s ratio="
        f"{p['turn_completed_s'] / b['turn_completed_s']:.2f}"
        f" (heartbeat timeout {HEARTBEAT_SECONDS:g} s; target: within the heartbeat"
        " timeout + a few seconds, like bare)"
    )


if __name__ == "__main__":
    main()
