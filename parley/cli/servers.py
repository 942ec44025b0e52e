"""The commands that run servers: ``dev``, ``gateway``, ``plans-service``, ``worker``,
``deploy``. Client side: each starts a process's servers or asks Temporal; loading the
worker's tools and model is ``parley.worker``'s job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from parley.cli.app import fail, out, run_async, settings, warn
from parley.client import Conversations, connect


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
) -> None:
    """Run everything locally: Temporal dev server with UI, demo git projects, the
    reference plans service, a worker with the offline model, and the gateway with
    its approval page (a token for --user is printed)."""
    from parley.dev import DevOptions, run_dev

    try:
        run_async(
            lambda: run_dev(
                DevOptions(data_dir.resolve(), port, ui_port, plans_port, gateway_port, user),
                out,
            ),
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
) -> None:
    """Run the HTTP gateway: REST + AG-UI event streams + the approval page at /.
    Bearer tokens come from PARLEY_GATEWAY_TOKENS_FILE ('<user id> <token>' lines)."""
    from parley.gateway.access import TokenTable
    from parley.gateway.server import run_gateway
    from parley.logs import configure_logging
    from parley.redaction import remember_secrets

    config = settings()
    remember_secrets(os.environ)  # no secret of this process reaches a log line
    configure_logging(config.log_format)
    if not config.gateway_tokens_file:
        raise fail(
            "set PARLEY_GATEWAY_TOKENS_FILE to a file of '<user id> <token>' lines: the "
            "gateway takes the user from the token"
        )
    try:
        tokens = TokenTable.from_file(config.gateway_tokens_file)
    except ValueError as problem:
        raise fail(str(problem)) from None
    if not len(tokens):
        raise fail(f"{config.gateway_tokens_file} has no tokens: add '<user id> <token>' lines")
    bind_host = host or config.gateway_host
    bind_port = port or config.gateway_port

    async def work() -> None:
        conversations = Conversations(await connect(config, role="gateway"), config)
        out.print(f"gateway on http://{bind_host}:{bind_port} ({len(tokens)} token(s))")
        await run_gateway(conversations, tokens, bind_host, bind_port)

    try:
        run_async(work, serves=True)
    except OSError as problem:
        raise fail(f"could not listen on {bind_host}:{bind_port}: {problem}") from None
    except KeyboardInterrupt:
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


def worker() -> None:
    """Run a worker against TEMPORAL_ADDRESS with PARLEY_MODEL and PARLEY_TOOLS."""
    from parley.activities.http import new_http_client
    from parley.logs import configure_logging
    from parley.worker import load_tools_and_model, run_worker

    config = settings()
    configure_logging(config.log_format)
    http_client = new_http_client()  # the worker's one client; run_worker closes it
    # A bad configuration is reported before the cluster is even contacted.
    try:
        registry, model = load_tools_and_model(config, warn=warn, http_client=http_client)
    except ValueError as problem:
        raise fail(str(problem)) from None
    try:
        run_async(
            lambda: run_worker(config, registry=registry, model=model, http_client=http_client),
            serves=True,
        )
    except KeyboardInterrupt:
        out.print("stopped")


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
    from parley.deploys import DeployReport
    from parley.deploys import deploy as deploy_build

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
