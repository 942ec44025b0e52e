"""What the SDK's per-payload serialization-context question costs a confirmed turn: a
bench-only experiment, client side (it starts a dev server and worker subprocesses).

Sides on one dev server, each its own worker process and task queue, phases
interleaved (``throughput.py``'s method: ``--conversations`` at once, each ``--turns``
confirmed turns; CPU per turn of the dev server and of the side's worker from
``/proc/<pid>/stat``):

- ``parley`` and ``bare``: the SDK as installed;
- ``parley+direct`` and ``bare+direct``: the same, with the sandbox answering
  "which serialization context / store context for this payload?" by a direct call
  instead of a compiled and ``exec``-ed code string (``bench/sdk_patch``: a runtime
  patch in the worker process only, what an SDK fix would do);
- with ``--unsandboxed``, ``parley+unsandboxed`` and ``bare+unsandboxed``: no sandbox at
  all (an upper bound of what the sandbox costs, not a proposal);
- any other ``--sides``, e.g. ``parley+noupsert`` or ``parley+direct.noupsert``: the
  modes of ``bench/sdk_patch/sitecustomize.py``, joined by dots. A side's ratios are to
  ``bare`` with the same modes where that side runs, else to plain ``bare``.

``--count`` also counts, per confirmed turn, the context questions and workflow
activations of each worker. ``--profile DIR`` runs ``py-spy record`` on every worker
over the measured phases and prints, per side, the share of busy samples in the frames
that matter (sampling slows the workers: take CPU figures from a run without it).

Run from the repository root:
    nice -n 10 .venv/bin/python bench/sdk_context.py [--conversations 20] [--turns 3]
        [--rounds 3] [--count] [--unsandboxed] [--profile DIR [--py-spy PATH]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as h  # noqa: E402
from bench.throughput import phase  # noqa: E402
from bench.turn_latency import IDLE_LEAVES, py_spy_path  # noqa: E402
from parley.client import Conversations  # noqa: E402

PATCH_DIR = ROOT / "bench" / "sdk_patch"

#: Frames whose inclusive share of a worker's busy samples the profile reports.
#: Functions (py-spy's ``Class.name (file``) whose inclusive share the profile reports.
FRAMES = {
    "sandbox: serialization context (per payload)": "_Instance.get_serialization_context",
    "sandbox: store context (per payload)": "_Instance.get_external_store_context",
    "the same, answered directly (bench/sdk_patch)": "get_serialization_context (sitecustomize",
    "_CommandAwareDataConverter._get_current_dc": "_CommandAwareDataConverter._get_current_dc",
    "sandbox: any code string exec-ed (_run_code)": "_Instance._run_code",
    "decode_activation (payloads in)": "decode_activation (temporalio/bridge/worker.py",
    "encode_completion (payloads out)": "encode_completion (temporalio/bridge/worker.py",
    "workflow code (activate, inside the sandbox)": "_WorkflowInstanceImpl.activate",
    "sandbox: new instance": "SandboxedWorkflowRunner.create_instance",
    "activity bodies": "_ActivityInboundImpl.execute_activity",
    "activity heartbeats": "_ActivityWorker._heartbeat_async",
}
RATE = 100  # py-spy samples per second


def spawn(label: str, queue: str, address: str, store_dir: str, args: argparse.Namespace):
    """A worker subprocess for ``label`` (``side`` or ``side+mode``), with the patch's
    environment set only while it is started (the child inherits it)."""
    side, _, mode = label.partition("+")
    modes = [m for m in (*mode.split("."), "count" if args.count else "") if m]
    saved = dict(os.environ)
    if modes:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PATCH_DIR), saved.get("PYTHONPATH", "")) if p
        )
        os.environ["PARLEY_BENCH_SDK_PATCH"] = ",".join(modes)
        os.environ["PARLEY_BENCH_SDK_COUNT_FILE"] = str(Path(store_dir) / f"count-{label}.json")
    try:
        return h.WorkerProcess(side, address, queue, store_dir, turns=args.turns)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def start_spy(args: argparse.Namespace, label: str, pid: int) -> subprocess.Popen[bytes]:
    """``py-spy record`` attached to one worker: raw collapsed stacks of the thread
    holding the GIL (``--gil``: a thread waiting for it is not counted as busy)."""
    command = [py_spy_path(args.py_spy), "record", "-f", "raw", "-r", str(RATE), "--gil"]
    command += ["--pid", str(pid)]
    return subprocess.Popen(
        [*command, "-o", str(args.profile / f"{label}.txt")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def counts(store_dir: str, label: str) -> dict[str, int]:
    try:
        return json.loads((Path(store_dir) / f"count-{label}.json").read_text())
    except (OSError, ValueError):
        return {}


def frame_shares(raw: Path) -> tuple[int, Counter[str]]:
    """Busy samples (idle stacks dropped, as ``turn_latency.py`` does) and, per function
    (``name (file``, line numbers dropped), the samples with it anywhere on the stack."""
    busy = 0
    inclusive: Counter[str] = Counter()
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        if any(leaf in frames[-1] for leaf in IDLE_LEAVES):
            continue
        busy += int(count)
        for function in {frame.rpartition(":")[0] for frame in frames}:
            inclusive[function] += int(count)
    return busy, inclusive


async def measure(args: argparse.Namespace, store_dir: str) -> dict[str, Any]:
    labels = args.sides or ["parley", "parley+direct", "bare", "bare+direct"]
    if args.unsandboxed:
        labels += ["parley+unsandboxed", "bare+unsandboxed"]
    if "bare" not in labels:
        labels.append("bare")
    converter, _ = h.data_converter(h.bench_settings("unused", store_dir))
    env = await h.start_dev_server(converter)
    client, address, server = env.client, h.server_address(env), h.server_pid(env)
    tag = uuid.uuid4().hex[:6]
    queues = {label: f"sdk-{label.replace('+', '-')}-{tag}" for label in labels}
    workers = {label: spawn(label, queues[label], address, store_dir, args) for label in labels}
    spies: dict[str, subprocess.Popen[bytes]] = {}
    results: dict[str, Any] = {}
    try:
        for worker in workers.values():
            await worker.ready()

        def conversation(label: str):
            if label.startswith("parley"):
                settings = h.bench_settings(queues[label], store_dir, worker_wait_seconds=120.0)
                conversations = Conversations(client, settings)

                async def run() -> None:
                    session = h.new_session("sdk-p")
                    for _ in range(args.turns):
                        await h.parley_turn(conversations, session)

            else:

                async def run() -> None:
                    workflow_id = h.new_session("sdk-b")
                    for _ in range(args.turns):
                        await h.bare_turn(client, queues[label], workflow_id)

            return run

        runs = {label: conversation(label) for label in labels}
        for label in labels:  # warm-up, not counted
            await phase(runs[label], 3)
        if args.profile:
            spies = {label: start_spy(args, label, worker.pid) for label, worker in workers.items()}
            await asyncio.sleep(1)
        rows = {label: {"rate": [], "server": [], "worker": []} for label in labels}
        counted_before = {label: counts(store_dir, label) for label in labels}
        turns = args.conversations * args.turns
        for round_ in range(args.rounds):
            for label in labels:
                server_before = h.cpu_seconds(server)
                worker_before = h.cpu_seconds(workers[label].pid)
                took = await phase(runs[label], args.conversations)
                rows[label]["rate"].append(turns / took)
                rows[label]["server"].append((h.cpu_seconds(server) - server_before) * 1000 / turns)
                rows[label]["worker"].append(
                    (h.cpu_seconds(workers[label].pid) - worker_before) * 1000 / turns
                )
            print(
                f"round {round_ + 1}: "
                + "; ".join(
                    f"{label} {r['rate'][-1]:.1f}/s {r['server'][-1]:.0f}+{r['worker'][-1]:.0f} ms"
                    for label, r in rows.items()
                ),
                flush=True,
            )
        await asyncio.sleep(1.5)  # the count files are written every second
        for label in labels:
            after, before = counts(store_dir, label), counted_before[label]
            per_turn = {
                key: (after[key] - before.get(key, 0)) / (turns * args.rounds) for key in after
            }
            results[label] = {
                "turns_per_s_p50": statistics.median(rows[label]["rate"]),
                "server_cpu_ms_per_turn_p50": statistics.median(rows[label]["server"]),
                "worker_cpu_ms_per_turn_p50": statistics.median(rows[label]["worker"]),
                "phases": rows[label],
                "per_turn_counts": per_turn,
            }
    finally:
        for spy in spies.values():
            spy.send_signal(signal.SIGINT)
        for spy in spies.values():
            spy.wait(60)
        for worker in workers.values():
            worker.stop()
        await env.shutdown()
    return results


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    print()
    print(
        f"code: {h.git_revision()}; {args.conversations} conversations at once x {args.turns}"
        f" turns, {args.rounds} phases per side, interleaved; load {os.getloadavg()}"
    )
    print(
        f"{'side':<20} {'turns/s':>8} {'server ms':>10} {'worker ms':>10}"
        f" {'x bare (rate, server, worker)':>32}  counts per turn"
    )
    for label, r in results.items():
        base = results.get("bare+" + label.partition("+")[2], results["bare"])
        ratios = (
            r["turns_per_s_p50"] / base["turns_per_s_p50"],
            r["server_cpu_ms_per_turn_p50"] / base["server_cpu_ms_per_turn_p50"],
            r["worker_cpu_ms_per_turn_p50"] / base["worker_cpu_ms_per_turn_p50"],
        )
        count_text = ", ".join(f"{k} {v:.1f}" for k, v in r["per_turn_counts"].items())
        print(
            f"{label:<20} {r['turns_per_s_p50']:8.1f} {r['server_cpu_ms_per_turn_p50']:10.1f}"
            f" {r['worker_cpu_ms_per_turn_p50']:10.1f}"
            f" {', '.join(f'{x:.2f}' for x in ratios):>32}  {count_text}"
        )
    for side in ("parley", "bare"):
        if f"{side}+direct" in results:
            was, now = results[side], results[f"{side}+direct"]
            saved = was["worker_cpu_ms_per_turn_p50"] - now["worker_cpu_ms_per_turn_p50"]
            print(
                f"{side}: the direct answer saves {saved:.1f} ms of worker CPU per turn"
                f" ({saved / was['worker_cpu_ms_per_turn_p50']:.0%})"
            )
    if not args.profile:
        return
    turns = args.conversations * args.turns * args.rounds
    profiles = {label: frame_shares(args.profile / f"{label}.txt") for label in results}
    for label, (busy, inclusive) in profiles.items():
        print(f"\n== {label}: py-spy --gil, {busy * 1000 / RATE / turns:.1f} ms busy per turn")
        for name, prefix in FRAMES.items():
            n = sum(v for k, v in inclusive.items() if k.startswith(prefix))
            if n:
                print(f"{n / busy:6.1%} {n * 1000 / RATE / turns:6.2f} ms/turn  {name}")
    if "parley" not in profiles:
        return
    (_, parley), (_, bare) = profiles["parley"], profiles["bare"]
    print("\n== parley - bare, ms per turn (inclusive), the 30 largest differences")
    for function in sorted(parley, key=lambda f: bare.get(f, 0) - parley[f])[:30]:
        ms = [n * 1000 / RATE / turns for n in (parley[function], bare.get(function, 0))]
        print(f"{ms[0]:6.2f} {ms[1]:6.2f} {ms[0] - ms[1]:+6.2f}  {function}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=20, help="at once (20)")
    parser.add_argument("--turns", type=int, default=3, help="turns per conversation (3)")
    parser.add_argument("--rounds", type=int, default=3, help="phases per side (3)")
    parser.add_argument("--count", action="store_true", help="count context questions")
    parser.add_argument("--unsandboxed", action="store_true", help="add unsandboxed sides")
    parser.add_argument(
        "--sides",
        nargs="+",
        default=None,
        help="side+mode[.mode] labels (parley parley+direct bare bare+direct)",
    )
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--py-spy", default=None, metavar="PATH")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="parley-bench-sdk-") as store_dir:
        results = asyncio.run(measure(args, store_dir))
    report(results, args)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
