"""One benchmark worker in its own process (``bench/_harness.py`` starts it).

``--side parley``: ``parley.worker.wiring.build_worker`` with the benchmark's one-tool registry
and scripted model (``--turns`` confirmed turns per conversation); ``--side bare``: the
``BareConversation`` worker. Both use Parley's data converter and the SDK's default
capacity (1,000 cached workflows). Prints ``ready`` once polling; SIGTERM shuts down.

    .venv/bin/python bench/_worker.py --side parley --address 127.0.0.1:7233 \\
        --task-queue q --store-dir /tmp/store [--tool-delay S --tool-marker PATH] \\
        [--otlp-url http://127.0.0.1:4318/v1/traces]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402

from bench import _harness  # noqa: E402
from parley.observability import tracing  # noqa: E402


async def serve(args: argparse.Namespace) -> None:
    settings = _harness.bench_settings(args.task_queue, args.store_dir)
    converter, _ = _harness.data_converter(settings)
    if args.otlp_url:  # traced (bench/tracing.py): the OTLP exporter and the plugin
        tracing.configure(replace(settings, otlp_traces_url=args.otlp_url), "worker")
    client = await Client.connect(args.address, data_converter=converter, plugins=tracing.plugins())
    if args.side == "parley":
        worker = _harness.parley_worker(client, settings, args.turns)
    else:
        worker = _harness.bare_worker(client, args.task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="a benchmark worker")
    parser.add_argument("--side", choices=("parley", "bare"), required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--store-dir", required=True)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--tool-delay", type=float, default=0.0)
    parser.add_argument("--tool-marker", default=None)
    parser.add_argument("--otlp-url", default=None, help="trace to this OTLP/HTTP URL")
    args = parser.parse_args()
    _harness.TOOL_DELAY = args.tool_delay
    _harness.TOOL_MARKER = args.tool_marker
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
