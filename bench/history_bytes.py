"""History bytes per confirmed turn: Parley against a bare Temporal workflow.

A confirmed turn: a user message, the model proposes one ``confirm`` tool call, the call
is pending, the user approves it, the tool runs, the model replies with text. Parley
does it with ``Conversations.send`` + ``Conversations.decide`` against a real worker
(``worker.build_worker``) and a scripted model; the baseline (``bench/bare_workflow.py``)
does the same round trips with a plain workflow: 1 update-with-start + 1 update,
3 instant activities.

Both run on one Temporal dev server, interleaved in rounds (Parley, bare, Parley,
bare, ...). Each round is one conversation of ``--turns`` confirmed turns on each side;
a turn's size is the sum of ``len(event.SerializeToString())`` over the events it added.
The script reports the last turn (what every turn of a conversation costs) and the
first turn with the workflow start, per round, as medians, and broken down by event
type, and ends with two lines:

    history bytes turn 1 with the start: parley p50=NNNN bare p50=NNNN ratio=X.XX (target <= 1.5)
    history bytes per confirmed turn: parley p50=NNNN bare p50=NNNN ratio=X.XX (target <= 1.5)

Run from the repository root:
    .venv/bin/python bench/history_bytes.py [--rounds N] [--turns N] [--json PATH]
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
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `worker`, `workflows`, `bench` importable
    sys.path.insert(0, str(ROOT))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402

from bench._harness import (  # noqa: E402
    bare_turn,
    bare_worker,
    bench_settings,
    data_converter,
    git_revision,
    new_session,
    parley_turn,
    parley_worker,
    start_dev_server,
)
from parley.client import Conversations  # noqa: E402

TARGET_RATIO = 1.5
PAYLOAD_TYPE = "temporal.api.common.v1.Payload"


# --- measuring ----------------------------------------------------------------------


@dataclass
class Measure:
    bytes: int
    events: int
    payload_bytes: int
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)


def _is_repeated(fd: Any) -> bool:
    if hasattr(fd, "is_repeated"):  # protobuf >= 6 (``label`` is gone in newer upb)
        return bool(fd.is_repeated)
    return fd.label == fd.LABEL_REPEATED


def payload_sizes(message: Any) -> list[int]:
    """The size of every ``Payload`` inside a proto message (inputs, results, headers,
    memo, search attributes, user metadata such as summaries)."""
    if message.DESCRIPTOR.full_name == PAYLOAD_TYPE:
        return [message.ByteSize()]
    sizes: list[int] = []
    for fd, value in message.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.type == value_fd.TYPE_MESSAGE:
                sizes += [size for v in value.values() for size in payload_sizes(v)]
        elif _is_repeated(fd):
            sizes += [size for v in value for size in payload_sizes(v)]
        else:
            sizes += payload_sizes(value)
    return sizes


def _payload_bytes(message: Any) -> int:
    return sum(payload_sizes(message))


def measure(events: list[HistoryEvent]) -> Measure:
    by_type: dict[str, dict[str, int]] = defaultdict(
        lambda: {"count": 0, "bytes": 0, "payload_bytes": 0}
    )
    for event in events:
        row = by_type[EventType.Name(event.event_type)]
        row["count"] += 1
        row["bytes"] += len(event.SerializeToString())
        row["payload_bytes"] += _payload_bytes(event)
    return Measure(
        bytes=sum(r["bytes"] for r in by_type.values()),
        events=len(events),
        payload_bytes=sum(r["payload_bytes"] for r in by_type.values()),
        by_type=dict(by_type),
    )


WORKFLOW_TASK_CLOSED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}


async def settled_history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    """The history once the turn is fully recorded: no workflow task open and nothing
    new 0.1 s later (at most ~5 s). The update's result reaches the client with the
    workflow task that completes it, so this normally returns after one extra fetch."""
    previous = -1
    deadline = time.monotonic() + 5
    while True:
        events = list((await handle.fetch_history()).events)
        scheduled = sum(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED for e in events
        )
        closed = sum(e.event_type in WORKFLOW_TASK_CLOSED for e in events)
        if (scheduled == closed and len(events) == previous) or time.monotonic() > deadline:
            return events
        previous = len(events)
        await asyncio.sleep(0.1)


@dataclass
class Round:
    """One conversation of ``turns`` confirmed turns on one side: what its first turn
    cost (with the workflow start) and what its last turn added."""

    first: Measure
    later: Measure


def split_turns(events: list[HistoryEvent], ends: list[int]) -> Round:
    """``ends[i]``: the number of events once turn ``i + 1`` was recorded."""
    return Round(first=measure(events[: ends[0]]), later=measure(events[ends[-2] : ends[-1]]))


async def parley_round(conversations: Conversations, turns: int) -> Round:
    session = new_session("bench")
    handle = conversations.handle(session)
    ends: list[int] = []
    try:
        for _ in range(turns):
            await parley_turn(conversations, session)
            events = await settled_history(handle)
            ends.append(len(events))
        return split_turns(events, ends)
    finally:
        await handle.terminate(reason="benchmark round measured")


async def bare_round(client: Client, task_queue: str, turns: int) -> Round:
    workflow_id = new_session("bare")
    handle = client.get_workflow_handle(workflow_id)
    ends: list[int] = []
    try:
        for _ in range(turns):
            await bare_turn(client, task_queue, workflow_id)
            events = await settled_history(handle)
            ends.append(len(events))
        return split_turns(events, ends)
    finally:
        await handle.terminate(reason="benchmark round measured")


# --- reporting ----------------------------------------------------------------------


def _totals(m: Measure) -> dict[str, int]:
    return {"bytes": m.bytes, "events": m.events, "payload_bytes": m.payload_bytes}


def median_round(measures: list[Measure]) -> Measure:
    """The round whose size is the (lower) median."""
    ordered = sorted(measures, key=lambda m: m.bytes)
    return ordered[(len(ordered) - 1) // 2]


def breakdown_table(parley: Measure, bare: Measure) -> str:
    names = sorted(
        set(parley.by_type) | set(bare.by_type),
        key=lambda n: -parley.by_type.get(n, {}).get("bytes", 0),
    )
    empty = {"count": 0, "bytes": 0, "payload_bytes": 0}
    lines = [
        f"{'event type':<48} {'parley n':>8} {'bytes':>7} {'payload':>7}"
        f" | {'bare n':>6} {'bytes':>7} {'payload':>7}"
    ]
    for name in names:
        p, b = parley.by_type.get(name, empty), bare.by_type.get(name, empty)
        lines.append(
            f"{name.removeprefix('EVENT_TYPE_'):<48} {p['count']:>8} {p['bytes']:>7}"
            f" {p['payload_bytes']:>7} | {b['count']:>6} {b['bytes']:>7} {b['payload_bytes']:>7}"
        )
    lines.append(
        f"{'total':<48} {parley.events:>8} {parley.bytes:>7} {parley.payload_bytes:>7}"
        f" | {bare.events:>6} {bare.bytes:>7} {bare.payload_bytes:>7}"
    )
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------


async def measure_rounds(
    rounds: int, turns: int, store_dir: str
) -> tuple[list[Round], list[Round], str]:
    """Start a dev server and both workers, run the interleaved rounds, shut down."""
    tag = uuid.uuid4().hex[:8]
    settings = bench_settings(f"bench-parley-{tag}", store_dir)
    bare_queue = f"bench-bare-{tag}"
    converter, converter_name = data_converter(settings)
    env = await start_dev_server(converter)
    parley_rounds: list[Round] = []
    bare_rounds: list[Round] = []
    try:
        client = env.client
        parley = parley_worker(client, settings, turns)
        bare = bare_worker(client, bare_queue)
        conversations = Conversations(client, settings)
        async with parley, bare:
            for i in range(1, rounds + 1):
                p = await parley_round(conversations, turns)
                b = await bare_round(client, bare_queue, turns)
                parley_rounds.append(p)
                bare_rounds.append(b)
                print(
                    f"round {i:>2}: turn {turns}: parley {p.later.bytes:>6} B"
                    f" {p.later.events:>3} events | bare {b.later.bytes:>6} B"
                    f" {b.later.events:>3} events  (turn 1 with the start: parley"
                    f" {p.first.bytes} B, bare {b.first.bytes} B)",
                    flush=True,
                )
    finally:
        await env.shutdown()
    return parley_rounds, bare_rounds, converter_name


def summarize(
    label: str, parley_measures: list[Measure], bare_measures: list[Measure]
) -> dict[str, Any]:
    """Print one comparison (medians and the breakdown) and return its numbers."""
    parley_p50 = statistics.median(m.bytes for m in parley_measures)
    bare_p50 = statistics.median(m.bytes for m in bare_measures)
    ratio = parley_p50 / bare_p50
    p_med, b_med = median_round(parley_measures), median_round(bare_measures)

    def p50(measures: list[Measure], attr: str) -> float:
        return statistics.median(getattr(m, attr) for m in measures)

    print()
    print(f"== {label}")
    print(
        f"events: parley p50={p50(parley_measures, 'events'):g}"
        f" bare p50={p50(bare_measures, 'events'):g}; payload bytes: parley"
        f" p50={p50(parley_measures, 'payload_bytes'):g}"
        f" bare p50={p50(bare_measures, 'payload_bytes'):g}"
    )
    print(
        "bytes by event type, median round of each side"
        " (payload = bytes of the Payload messages inside those events):"
    )
    print(breakdown_table(p_med, b_med))
    return {
        "parley": {
            "p50_bytes": parley_p50,
            "p50_events": p50(parley_measures, "events"),
            "p50_payload_bytes": p50(parley_measures, "payload_bytes"),
            "per_round": [_totals(m) for m in parley_measures],
            "median_round": asdict(p_med),
        },
        "bare": {
            "p50_bytes": bare_p50,
            "p50_events": p50(bare_measures, "events"),
            "p50_payload_bytes": p50(bare_measures, "payload_bytes"),
            "per_round": [_totals(m) for m in bare_measures],
            "median_round": asdict(b_med),
        },
        "ratio": ratio,
    }


def report(
    parley_rounds: list[Round], bare_rounds: list[Round], turns: int, converter_name: str
) -> dict[str, Any]:
    """Print both comparisons and the summary lines; return the numbers (for --json)."""
    code = git_revision()
    print()
    print(
        f"data converter: {converter_name}; code: {code}; rounds: {len(parley_rounds)};"
        f" turns per conversation: {turns}"
    )
    later = summarize(
        f"turn {turns} of a conversation: the bytes that turn adds",
        [r.later for r in parley_rounds],
        [r.later for r in bare_rounds],
    )
    first = summarize(
        "turn 1, with the workflow start (and, for Parley, the tool catalogue)",
        [r.first for r in parley_rounds],
        [r.first for r in bare_rounds],
    )
    print()
    for name, numbers in (("turn 1 with the start", first), ("per confirmed turn", later)):
        print(
            f"history bytes {name}: parley p50={numbers['parley']['p50_bytes']:.0f}"
            f" bare p50={numbers['bare']['p50_bytes']:.0f} ratio={numbers['ratio']:.2f}"
            f" (target <= {TARGET_RATIO})"
        )
    return {
        "rounds": len(parley_rounds),
        "turns": turns,
        "data_converter": converter_name,
        "code": code,
        "later_turn": later,
        "first_turn": first,
        "target_ratio": TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each side (10)")
    parser.add_argument(
        "--turns", type=int, default=3, help="confirmed turns per conversation (3; >= 2)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the numbers to PATH"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.turns < 2:
        parser.error("--turns must be at least 2 (the last turn is measured alone)")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as store_dir:
        measured = asyncio.run(measure_rounds(args.rounds, args.turns, store_dir))
    parley_rounds, bare_rounds, converter_name = measured
    numbers = report(parley_rounds, bare_rounds, args.turns, converter_name)
    print(f"({time.monotonic() - began:.1f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
