"""History per turn over a long conversation: does a late turn cost more than an early one?

One Parley conversation of N turns (default 1,000). Every turn: the user sends a
message, the model calls an ``auto`` tool that returns 20 KB of text, the model answers.
At turns 10, 100, 250, 500, 750 and N the script records the bytes that turn added to
history (its events up to its update's completion, in the run it ran in). At the end it
reports the largest single payload in every run of the conversation and how many runs
(continue-as-new) there were. It prints one line per measured turn and a last line:

    turn 1000 / turn 10 history bytes: X.XX (target <= 1.5); largest payload NNN B

Run from the repository root:
    .venv/bin/python bench/long_conversation.py [--turns N] [--result-kb K] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `worker`, `workflows`, `bench` importable
    sys.path.insert(0, str(ROOT))

from langchain_core.tools import tool  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

import parley.contracts  # noqa: E402
from bench.history_bytes import (  # noqa: E402
    bench_settings,
    data_converter,
    git_revision,
    payload_sizes,
)
from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel  # noqa: E402
from parley.cli.binaries import temporal_cli  # noqa: E402
from parley.client import Conversations  # noqa: E402
from parley.contracts import workflow_id_for  # noqa: E402
from parley.tools import ToolRegistry, auto  # noqa: E402
from parley.worker.wiring import build_worker  # noqa: E402

USER = "bench-user"
TARGET_RATIO = 1.5


def page_tool(size: int) -> Any:
    @tool
    async def fetch_page(n: int) -> str:
        """Fetch page n of a document."""
        head = f"page {n}: "
        return head + "x" * (size - len(head))

    return fetch_page


def script(turns: int) -> ScriptFileChatModel:
    entries = []
    for n in range(1, turns + 1):
        call = {"name": "fetch_page", "id": f"p{n}", "args": {"n": n}}
        entries.append(ScriptEntry.model_validate({"content": "", "tool_calls": [call]}))
        entries.append(ScriptEntry.model_validate({"content": f"read page {n}"}))
    return ScriptFileChatModel(entries=entries)


async def turn_bytes(client: Client, conversations: Conversations, session: str, n: int) -> int:
    """Run turn ``n`` and return the bytes it added (up to its update's completion)."""
    run_id = (await conversations.handle(session).describe()).run_id
    handle = client.get_workflow_handle(workflow_id_for(session), run_id=run_id)
    before = len([e async for e in handle.fetch_history_events()])
    result = await conversations.send(session, USER, f"read page {n}")
    if result.reply != f"read page {n}":
        raise RuntimeError(f"turn {n}: unexpected result {result!r}")
    added = [e async for e in handle.fetch_history_events()][before:]
    ends = [
        i
        for i, e in enumerate(added)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]
    return sum(e.ByteSize() for e in added[: ends[-1] + 1])


async def run(turns: int, result_kb: int, store_dir: str) -> dict[str, Any]:
    settings = bench_settings(f"bench-long-{uuid.uuid4().hex[:8]}", store_dir)
    converter, converter_name = data_converter(settings)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=parley.contracts.SEARCH_ATTRIBUTES,
        data_converter=converter,
    )
    measured_turns = sorted({t for t in (10, 100, 250, 500, 750, turns) if t <= turns})
    sizes: dict[int, int] = {}
    began = time.monotonic()
    try:
        client = env.client
        registry = ToolRegistry([auto(page_tool(result_kb * 1024))])
        conversations = Conversations(client, settings)
        session = f"long-{uuid.uuid4().hex[:8]}"
        async with build_worker(client, settings, registry=registry, model=script(turns)):
            await conversations.send(session, USER, "read page 1")
            for n in range(2, turns + 1):
                if n in measured_turns:
                    sizes[n] = await turn_bytes(client, conversations, session, n)
                    print(f"turn {n:>5}: {sizes[n]:>6} B of history", flush=True)
                else:
                    await conversations.send(session, USER, f"read page {n}")
            workflow_id = workflow_id_for(session)
            runs = [r async for r in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
            largest = 0
            for r in runs:
                handle = client.get_workflow_handle(workflow_id, run_id=r.run_id)
                async for event in handle.fetch_history_events():
                    largest = max([largest, *payload_sizes(event)])
    finally:
        await env.shutdown()
    first, last = measured_turns[0], measured_turns[-1]
    return {
        "code": git_revision(),
        "data_converter": converter_name,
        "turns": turns,
        "result_bytes": result_kb * 1024,
        "bytes_by_turn": sizes,
        "ratio_last_to_first": sizes[last] / sizes[first],
        "largest_payload_bytes": largest,
        "runs": len(runs),
        "seconds": round(time.monotonic() - began, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns (1000; >= 10)")
    parser.add_argument("--result-kb", type=int, default=20, help="tool result size (20 KB)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    if args.turns < 10:
        parser.error("--turns must be at least 10")
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as store_dir:
        numbers = asyncio.run(run(args.turns, args.result_kb, store_dir))
    sizes = numbers["bytes_by_turn"]
    first, last = min(sizes), max(sizes)
    print(
        f"\ncode: {numbers['code']}; converter: {numbers['data_converter']}; runs (continue-as-new"
        f" + 1): {numbers['runs']}; {numbers['seconds']} s"
    )
    print(
        f"turn {last} / turn {first} history bytes: {numbers['ratio_last_to_first']:.2f}"
        f" (target <= {TARGET_RATIO}); largest payload {numbers['largest_payload_bytes']} B"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
