"""Issue 37's targets table in one command: every row measured side by side with bare
Temporal (``bench/bare_workflow.py``), each ratio over ``--runs`` runs. Client side (it
starts dev servers and worker subprocesses through the other bench modules).

Nothing is measured here that another script does not measure: each group of rows
calls that script's own function, with this script's sizes, once per run:

- ``throughput.measure`` (1 worker): confirmed turns/s with N conversations at once,
  and the dev server's and the worker's CPU per confirmed turn (``/proc/<pid>/stat``
  of the dev server process and of each side's worker process, apart);
- ``turn_latency.measure``: confirmed-turn latency p50;
- ``history_bytes.measure_rounds``: history bytes per confirmed turn;
- ``streaming.run``: history bytes per streamed turn / the same turn whole, and the
  first delta after the provider's first word (a running conversation, and the turn
  that starts one);
- ``idle_scale.measure``: start rate, and with ``--idle`` conversations waiting, the
  worker's RSS and the decide latency p95.

A run does each group once (each on its own dev server); ``--runs`` (3) runs one after
the other. A row's figure is the median over the runs of that run's Parley / bare
ratio (each a ratio of p50s measured side by side), or of Parley's own value where the
target is absolute. The load average (``os.getloadavg()``) is printed before and after
each run, so that a reader can tell a quiet run from a shared one.

Run from the repository root (at low priority when the machine is shared):
    nice -n 10 .venv/bin/python bench/table.py --small             # a few minutes
    nice -n 10 .venv/bin/python bench/table.py [--runs 3] [--idle 10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as h  # noqa: E402
from bench import history_bytes, idle_scale, streaming, throughput, turn_latency  # noqa: E402

#: Sizes per group: the issue's defaults, and ``--small`` (a few minutes in all).
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "default": {
        "throughput": {"conversations": 50, "turns": 4, "rounds": 3},
        "latency": {"turns": 40, "turns_per_conversation": 5, "warmup": 3},
        "history": {"rounds": 10, "turns": 3},
        "streaming": {"rounds": 10, "words": 30, "word_ms": 50},
        "idle": {"conversations": 10_000, "concurrency": 50, "batch": 500, "decisions": 200},
    },
    "small": {
        "throughput": {"conversations": 20, "turns": 2, "rounds": 2},
        "latency": {"turns": 10, "turns_per_conversation": 5, "warmup": 2},
        "history": {"rounds": 3, "turns": 2},
        "streaming": {"rounds": 2, "words": 30, "word_ms": 50},
        "idle": {"conversations": 200, "concurrency": 20, "batch": 100, "decisions": 20},
    },
}
GROUPS = ("throughput", "latency", "history", "streaming", "idle")


@dataclass(frozen=True)
class Row:
    """One row of the table: how to read a run's numbers, and the target."""

    measure: str
    group: str
    #: run numbers -> (Parley's value, bare's value or None); ratio = parley / bare
    values: Callable[[dict[str, Any]], tuple[float, float | None]]
    unit: str
    target: float
    #: "ratio>=", "ratio<=" (on Parley / bare) or "abs<=" (on Parley's own value)
    kind: str


def _throughput(run: dict[str, Any], key: str) -> tuple[float, float]:
    sides = run["throughput"]["1"]
    return sides["parley"][key], sides["bare"][key]


def _idle(run: dict[str, Any], path: tuple[str, ...]) -> tuple[float, float]:
    numbers = run["idle"]
    for part in path[:-1]:
        numbers = numbers[part]
    return numbers["parley"][path[-1]], numbers["bare"][path[-1]]


ROWS = (
    Row(
        "confirmed turns/s, {conversations} conversations at once, 1 worker",
        "throughput",
        lambda r: _throughput(r, "p50"),
        "/s",
        0.9,
        "ratio>=",
    ),
    Row(
        "dev server CPU per confirmed turn",
        "throughput",
        lambda r: _throughput(r, "server_cpu_ms_per_turn_p50"),
        " ms",
        1.2,
        "ratio<=",
    ),
    Row(
        "worker CPU per confirmed turn",
        "throughput",
        lambda r: _throughput(r, "workers_cpu_ms_per_turn_p50"),
        " ms",
        1.3,
        "ratio<=",
    ),
    Row(
        "confirmed-turn latency p50",
        "latency",
        lambda r: (r["latency"]["parley"]["p50_ms"], r["latency"]["bare"]["p50_ms"]),
        " ms",
        1.05,
        "ratio<=",
    ),
    Row(
        "conversation start rate",
        "idle",
        lambda r: (
            r["idle"]["start_rate_per_s"]["parley"]["batch_p50"],
            r["idle"]["start_rate_per_s"]["bare"]["batch_p50"],
        ),
        "/s",
        0.8,
        "ratio>=",
    ),
    Row(
        "history bytes per streamed turn / the same turn whole",
        "streaming",
        lambda r: (
            r["streaming"]["turn_bytes"]["streamed_p50"],
            r["streaming"]["turn_bytes"]["whole_p50"],
        ),
        " B",
        2.0,
        "ratio<=",
    ),
    Row(
        "first delta after the provider's first word, running conversation",
        "streaming",
        lambda r: (r["streaming"]["first_delta_ms"]["p50"], None),
        " ms",
        100,
        "abs<=",
    ),
    Row(
        "first delta after the provider's first word, the turn that starts one",
        "streaming",
        lambda r: (r["streaming"]["first_delta_ms_starting_turn"]["p50"], None),
        " ms",
        100,
        "abs<=",
    ),
    Row(
        "history bytes per confirmed turn (plain)",
        "history",
        lambda r: (r["history"]["parley_p50"], r["history"]["bare_p50"]),
        " B",
        1.3,
        "ratio<=",
    ),
    Row(
        "{idle} idle conversations: worker RSS",
        "idle",
        lambda r: (
            r["idle"]["rss_mb"]["all_waiting"]["parley"],
            r["idle"]["rss_mb"]["all_waiting"]["bare"],
        ),
        " MB",
        400,
        "abs<=",
    ),
    Row(
        "{idle} idle conversations: decide p95",
        "idle",
        lambda r: _idle(r, ("decide_ms", "p95")),
        " ms",
        200,
        "abs<=",
    ),
)


# --- one run: each group once, through its own script's function ----------------------


async def run_history(sizes: dict[str, Any], store_dir: str) -> dict[str, Any]:
    parley, bare, _ = await history_bytes.measure_rounds(sizes["rounds"], sizes["turns"], store_dir)
    return {
        "parley_p50": statistics.median(r.later.bytes for r in parley),
        "bare_p50": statistics.median(r.later.bytes for r in bare),
    }


async def run_group(group: str, sizes: dict[str, Any], store_dir: str) -> dict[str, Any]:
    if group == "throughput":
        return await throughput.measure(Namespace(**sizes, workers=[1]), store_dir)
    if group == "latency":
        return await turn_latency.measure(Namespace(**sizes, profile=None, py_spy=None), store_dir)
    if group == "history":
        return await run_history(sizes, store_dir)
    if group == "streaming":
        return await streaming.run(Namespace(**sizes))
    if group == "idle":
        return await idle_scale.measure(Namespace(**sizes, seed=1), store_dir)
    raise ValueError(group)


async def one_run(
    index: int, sizes: dict[str, dict[str, Any]], groups: list[str]
) -> dict[str, Any]:
    run: dict[str, Any] = {"load_before": os.getloadavg()}
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parley-bench-table-") as store_dir:
        for group in groups:
            print(f"== run {index}: {group}", flush=True)
            started = time.monotonic()
            run[group] = await run_group(group, sizes[group], store_dir)
            run[f"{group}_seconds"] = time.monotonic() - started
    run["load_after"] = os.getloadavg()
    run["seconds"] = time.monotonic() - began
    print(
        f"== run {index} done in {run['seconds']:.0f} s; load average before"
        f" {_load(run['load_before'])}, after {_load(run['load_after'])}",
        flush=True,
    )
    return run


# --- the table ------------------------------------------------------------------------


def _load(load: tuple[float, float, float] | list[float]) -> str:
    return "/".join(f"{x:.1f}" for x in load)


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    digits = 0 if abs(value) >= 100 or unit in (" B", " MB") else 1
    return f"{value:,.{digits}f}{unit}"


def summarize(row: Row, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A row over the runs: each run's values and ratio, their medians, and whether the
    median meets the target."""
    pairs = [row.values(run) for run in runs if row.group in run]
    parley = [p for p, _ in pairs]
    bare = [b for _, b in pairs if b is not None]
    ratios = [p / b for p, b in pairs if b]
    out: dict[str, Any] = {
        "parley": parley,
        "bare": bare,
        "ratios": ratios,
        "parley_p50": statistics.median(parley) if parley else math.nan,
        "bare_p50": statistics.median(bare) if bare else math.nan,
        "ratio_p50": statistics.median(ratios) if ratios else math.nan,
    }
    judged = out["parley_p50"] if row.kind == "abs<=" else out["ratio_p50"]
    if math.isnan(judged):
        out["met"] = None
    elif row.kind == "ratio>=":
        out["met"] = judged >= row.target
    else:
        out["met"] = judged <= row.target
    return out


def print_table(runs: list[dict[str, Any]], sizes: dict[str, dict[str, Any]]) -> list[dict]:
    names = {"conversations": sizes["throughput"]["conversations"]}
    names["idle"] = f"{sizes['idle']['conversations']:,}"
    lines = [
        "| measure | today's value: Parley vs bare (p50 of runs) | ratio (runs) | target | met? |",
        "|---|---|---|---|---|",
    ]
    rows = []
    for row in ROWS:
        if not any(row.group in run for run in runs):
            continue
        s = summarize(row, runs)
        label = row.measure.format(**names)
        value = _fmt(s["parley_p50"], row.unit)
        if s["bare"]:
            value += f" vs {_fmt(s['bare_p50'], row.unit)}"
        ratio = (
            f"{s['ratio_p50']:.2f}× ({', '.join(f'{r:.2f}' for r in s['ratios'])})"
            if s["ratios"]
            else "—"
        )
        if row.kind == "abs<=":
            target = f"≤ {row.target:g}{row.unit}"
        else:
            target = f"{'≥' if row.kind == 'ratio>=' else '≤'} {row.target:g}×"
        met = {True: "met", False: "**not met**", None: "?"}[s["met"]]
        lines.append(f"| {label} | {value} | {ratio} | {target} | {met} |")
        rows.append({"measure": label, **s, "target": row.target, "kind": row.kind})
    print("\n".join(lines))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per ratio (3)")
    parser.add_argument("--small", action="store_true", help="small sizes: a few minutes")
    parser.add_argument("--idle", type=int, default=None, help="idle conversations per side")
    parser.add_argument("--conversations", type=int, default=None, help="at once (50)")
    parser.add_argument(
        "--only", nargs="+", choices=GROUPS, default=list(GROUPS), help="groups of rows to run"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    sizes = {group: dict(s) for group, s in SIZES["small" if args.small else "default"].items()}
    if args.idle is not None:
        sizes["idle"]["conversations"] = max(1, args.idle)
        sizes["idle"]["batch"] = min(sizes["idle"]["batch"], sizes["idle"]["conversations"])
    sizes["idle"]["decisions"] = min(sizes["idle"]["decisions"], sizes["idle"]["conversations"])
    if args.conversations is not None:
        sizes["throughput"]["conversations"] = max(1, args.conversations)
    began = time.monotonic()
    runs = [asyncio.run(one_run(i + 1, sizes, args.only)) for i in range(args.runs)]
    print()
    print(
        f"code: {h.git_revision()}; {args.runs} run(s), {time.monotonic() - began:.0f} s;"
        f" {os.cpu_count()} cores; sizes: {json.dumps(sizes)}"
    )
    for i, run in enumerate(runs, 1):
        print(
            f"run {i}: load average (1/5/15 min) before {_load(run['load_before'])},"
            f" after {_load(run['load_after'])}; {run['seconds']:.0f} s"
        )
    print()
    rows = print_table(runs, sizes)
    if args.json is not None:
        numbers = {"code": h.git_revision(), "sizes": sizes, "runs": runs, "rows": rows}
        args.json.write_text(json.dumps(numbers, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
