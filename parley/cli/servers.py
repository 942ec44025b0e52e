"""The commands that run servers: ``dev``, ``gateway``, ``plans-service``, ``worker``,
``deploy``. Client side: each starts a process's servers or asks Temporal; loading the
worker's tools and model is ``parley.worker.wiring``'s job, serving and draining the gateway
``parley.gateway.server``'s.

What a container's health check runs: the gateway's ``/healthz`` (``readyz`` for
readiness); ``parley worker --check --health-file F``, which reads the heartbeat a
``parley worker --health-file F`` writes from its event loop (``heartbeat``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from parley.cli.app import fail, out, run_async, settings, warn
from parley.client import Conversations, connect
from parley.observability.logs import configure_logging
from parley.observability.redaction import remember_secrets
from parley.worker.deploys import DeployReport
from parley.worker.deploys import deploy as deploy_build


def dev(
    data_dir: Annotated[
        Path, typer.Option(help="Where the dev server's SQLite file, demo repos and plans live.")
    ] = Path(".parley"),
    port: Annotated[int, typer.Option(help="Temporal frontend port.", min=1, max=65535)] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port.", min=1, max=65535)] = 8233,
    plans_port: Annotated[
        int, typer.Option(help="Reference plans service port (0: any free one).", min=0, max=65535)
    ] = 8765,
    gateway_port: Annotated[
        int, typer.Option(help="Gateway (HTTP API and approval page) port.", min=1, max=65535)
    ] = 8770,
    user: Annotated[
        str, typer.Option("--user", "-u", help="The user the gateway's printed token signs in.")
    ] = "alice",
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Also print the Temporal SDK's own warnings."),
    ] = False,
) -> None:
    """Run everything locally: Temporal dev server with UI, demo git projects, the
    reference plans service, a worker with the offline model, and the gateway with
    its approval page (a token for --user is printed)."""
    from parley.cli.dev import DevOptions, run_dev

    options = DevOptions(
        data_dir.resolve(), port, ui_port, plans_port, gateway_port, user, verbose=verbose
    )
    try:
        run_async(
            lambda: run_dev(options, out),
            serves=True,
        )  # returns once a SIGTERM has stopped everything
    except KeyboardInterrupt:
        pass
    out.print("stopped")


def gateway(
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on [PARLEY_GATEWAY_HOST].")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port [PARLEY_GATEWAY_PORT].", min=1, max=65535)
    ] = None,
    grace_seconds: Annotated[
        float,
        typer.Option(
            help="On SIGTERM: how long requests in flight may finish (streams that follow "
            "a conversation end at once, reconnectable).",
            min=1,
            max=3600,
        ),
    ] = 25.0,
) -> None:
    """Run the HTTP gateway: REST + AG-UI event streams + the approval page at /, and
    /healthz and /readyz for probes. Bearer tokens come from PARLEY_GATEWAY_TOKENS_FILE
    ('<user id> <token>' lines) and, with PARLEY_OIDC_ISSUER, from an OpenID Connect
    provider (JWTs). SIGTERM drains it, then it exits 0."""
    from parley.gateway.access import TokenTable
    from parley.gateway.oidc import OidcVerifier
    from parley.gateway.oidc_settings import OidcSettings
    from parley.gateway.server import run_gateway

    config = settings()
    remember_secrets(os.environ)  # no secret of this process reaches a log line
    configure_logging(config.log_format)
    try:
        oidc_settings = OidcSettings.from_env(os.environ)
    except ValueError as problem:
        raise fail(str(problem)) from None
    if not config.gateway_tokens_file and not oidc_settings.enabled:
        raise fail(
            "set PARLEY_GATEWAY_TOKENS_FILE to a file of '<user id> <token>' lines, or "
            "PARLEY_OIDC_ISSUER and PARLEY_OIDC_AUDIENCE: the gateway takes the user from "
            "the token"
        )
    try:
        file = config.gateway_tokens_file
        tokens = TokenTable.from_file(file) if file else TokenTable({})
    except ValueError as problem:
        raise fail(str(problem)) from None
    if config.gateway_tokens_file and not len(tokens):
        raise fail(f"{config.gateway_tokens_file} has no tokens: add '<user id> <token>' lines")
    bind_host = host or config.gateway_host
    bind_port = port or config.gateway_port

    async def reach() -> Conversations:
        return Conversations(await connect(config, role="gateway"), config)

    def serving_at(url: str, problem: str | None) -> None:
        users = f"{len(tokens)} token(s)"
        if oidc_settings.enabled:
            users += f", OpenID Connect users of {oidc_settings.issuer}"
        out.print(f"gateway on {url} ({users})")
        if problem:
            warn(
                f"{problem} Meanwhile /healthz answers, /readyz and the API answer 503, "
                "and the gateway keeps trying."
            )

    async def serve() -> None:
        oidc = None
        if oidc_settings.enabled:  # discovery and keys first: a failure is one line
            oidc = OidcVerifier(oidc_settings)
            try:
                await oidc.start()
            except BaseException:
                await oidc.aclose()
                raise
        await run_gateway(
            reach,
            config,
            tokens,
            bind_host,
            bind_port,
            grace_seconds=grace_seconds,
            on_serving=serving_at,
            oidc=oidc,
        )

    try:
        run_async(serve, serves=True)
    except OSError as problem:
        raise fail(f"could not listen on {bind_host}:{bind_port}: {problem}") from None
    except KeyboardInterrupt:
        pass
    out.print("stopped")


def plans_service(
    db: Annotated[Path, typer.Option(help="SQLite database file.")] = Path("plans.db"),
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """Run the reference plans REST service (API key from PARLEY_PLANS_API_KEY)."""
    from parley.services.plans import serve

    api_key = settings().plans_api_key
    if not api_key:
        raise fail("set PARLEY_PLANS_API_KEY: clients must send it as a bearer token")
    serve(host, port, db.resolve(), api_key)


def worker(
    health_file: Annotated[
        Path | None,
        typer.Option(
            help="Rewrite this file every 5 s while the worker runs (removed when it "
            "stops): what --check reads.",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check the worker that writes --health-file instead of running one: exit 0 "
            "if it beat within 30 s and its process lives, else 1 with one line (a "
            "container's health check).",
        ),
    ] = False,
) -> None:
    """Run a worker against TEMPORAL_ADDRESS with PARLEY_MODEL and PARLEY_TOOLS. SIGTERM
    stops it: no new task is taken, and running activities may finish for
    PARLEY_WORKER_GRACE_SECONDS (default 30)."""
    from parley.activities.http import new_http_client
    from parley.worker.wiring import load_tools_and_model, run_worker

    if check:
        if health_file is None:
            raise fail("--check reads the worker's --health-file: name it")
        problem = heartbeat_problem(health_file)
        if problem is not None:
            raise fail(problem)
        out.print(f"worker alive ({health_file})")
        return
    config = settings()
    configure_logging(config.log_format)
    http_client = new_http_client()  # the worker's one client; run_worker closes it
    # A bad configuration is reported before the cluster is even contacted.
    try:
        registry, model = load_tools_and_model(config, warn=warn, http_client=http_client)
    except ValueError as problem:
        raise fail(str(problem)) from None

    async def work() -> None:
        async with heartbeat(health_file):
            await run_worker(config, registry=registry, model=model, http_client=http_client)

    try:
        run_async(work, serves=True)
    except KeyboardInterrupt:
        out.print("stopped")


#: A worker's heartbeat: written this often, and stale (the worker wedged) after this.
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_STALE_SECONDS = 30.0


@contextlib.asynccontextmanager
async def heartbeat(path: Path | None) -> AsyncIterator[None]:
    """While the block runs, ``path`` holds this process's id, rewritten every
    ``HEARTBEAT_SECONDS`` by the event loop the worker runs on: a blocked loop stops it.
    It beats on while the worker stops gracefully, and is removed once it has."""
    if path is None:
        yield
        return

    async def beat() -> None:
        while True:
            _beat(path)  # on the loop itself: a loop that is blocked beats no more
            await asyncio.sleep(HEARTBEAT_SECONDS)

    beating = asyncio.create_task(beat())
    try:
        yield
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        _stop_beating(path)


def _beat(path: Path) -> None:
    written = path.with_name(f".{path.name}.{os.getpid()}")
    written.write_text(f"{os.getpid()}\n")
    os.replace(written, path)  # whole or not at all, for a reader


def _stop_beating(path: Path) -> None:
    path.unlink(missing_ok=True)


def heartbeat_problem(path: Path) -> str | None:
    """Why the worker that writes ``path`` is not healthy, in one line; None if it is."""
    try:
        pid = int(path.read_text().strip())
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return f"no worker heartbeat at {path}: no worker runs with --health-file {path}"
    except (OSError, ValueError) as err:
        return f"cannot read the worker heartbeat {path}: {err}"
    try:
        os.kill(pid, 0)  # no signal: is it there?
    except ProcessLookupError:
        return f"the worker (pid {pid}) that wrote {path} is gone"
    except PermissionError:
        pass  # there, another user's
    if age > HEARTBEAT_STALE_SECONDS:
        return (
            f"the worker (pid {pid}) has not beaten for {age:.0f} s: its event loop is "
            "blocked (a tool that blocks it?) or the process hangs"
        )
    return None


def deploy(
    build_id: Annotated[
        str, typer.Argument(help="The new workers' PARLEY_BUILD_ID, already running.")
    ],
    wait: Annotated[
        float,
        typer.Option(help="Seconds to wait for the build's workers to poll.", min=1, max=3600),
    ] = 60.0,
) -> None:
    """Make BUILD_ID the current worker build (Worker Versioning) and move every running
    conversation on an older build to it: one waiting on people moves at once, one in
    the middle of a turn right after the turn. Keep the old workers running until
    `temporal worker deployment describe-version` says their version is drained."""
    config = settings()

    async def work() -> DeployReport:  # a DeployRefused is a ValueError: one clear line
        client = await connect(config)
        return await deploy_build(client, config.deployment_name, build_id, wait_seconds=wait)

    report = run_async(work)
    was = f" (was {report.previous_build_id})" if report.previous_build_id else ""
    out.print(Text(f"build {build_id} of deployment {report.deployment} is current{was}"))
    out.print(
        Text(
            f"{report.signalled} running conversation(s) on other builds asked to move to it"
            + (f"; {len(report.missed)} ended meanwhile" if report.missed else "")
        )
    )
