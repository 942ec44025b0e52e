"""The ``parley`` command line. Client side: it talks to conversations through
``parley.client`` and starts servers (``dev``, ``worker``); no workflow logic here.

Every command has ``--help``. Scriptable commands print JSON with ``--json``; a refused
command exits 1 with one clear line on stderr. ``TEMPORAL_ADDRESS`` and
``PARLEY_TASK_QUEUE`` pick the cluster and the worker.

Long (about 550 lines) because it is the whole command surface in one place: each
command is a few lines of argument parsing and help text around one client call.
Printing is ``parley.rendering``; the interactive loop is ``parley.chat``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from parley.client import (
    ConversationRefused,
    Conversations,
    ConversationSummary,
    check_identity,
    connect,
)
from parley.contracts import (
    Decision,
    DecisionAction,
    StateQuery,
    TurnResult,
    check_user_id,
)
from parley.rendering import print_pending, print_snapshot, render_turn
from parley.settings import Settings

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from parley.tools import ToolRegistry


class _Cli(typer.Typer):
    """The console script. It ends the process with ``os._exit`` once the command is
    done and its output flushed: the Temporal client's Rust threads can otherwise crash
    interpreter teardown ("Fatal Python error: PyGILState_Release", exit -6) after the
    command has already succeeded (temporalio/sdk-python#300)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as done:
            code = done.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


app = _Cli(
    help="Parley: LLM-agent conversations as durable Temporal workflows.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# What users typed (messages, ids, configuration) is printed as it is: never read as Rich
# markup or ``:emoji:`` codes, never wrapped or cut to the terminal's width (text that
# is copied back, JSON, paths, must stay whole; the terminal folds long lines itself).
out = Console(emoji=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)
T = TypeVar("T")

Session = Annotated[str, typer.Option("--session", "-s", help="Conversation (session) id.")]
User = Annotated[str, typer.Option("--user", "-u", help="Your user id (required, not 'default').")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
CallIds = Annotated[
    list[str] | None,
    typer.Argument(help="Tool call ids to decide; none means every pending call."),
]


Remember = Annotated[
    bool,
    typer.Option(
        "--remember",
        help="Decide the same way, without asking, on later calls of the same tool with the "
        "same arguments in this conversation.",
    ),
]


def fail(message: str) -> typer.Exit:
    """Print ``message`` as one line on stderr; raise the result to exit with code 1."""
    err.print(Text.assemble(("error: ", "bold red"), " ".join(message.split("\n"))))
    return typer.Exit(1)


def warn(message: str) -> None:
    err.print(Text.assemble(("warning: ", "bold yellow"), message))


def run_async(work: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except ConversationRefused as refused:
        raise fail(refused.message) from None
    except (ValueError, FileNotFoundError) as problem:
        raise fail(str(problem)) from None


def settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as problem:
        raise fail(str(problem)) from None


async def conversations(session: str, user: str) -> Conversations:
    """A client for ``session``, once its ids are known to be well formed (so a bad id
    is reported as such, even when Temporal is unreachable)."""
    check_identity(session, user)
    config = settings()
    return Conversations(await connect(config), config)


# --- servers ------------------------------------------------------------------------


@app.command()
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
    from parley.dev import run_dev

    try:
        run_async(
            lambda: run_dev(
                data_dir.resolve(),
                port=port,
                ui_port=ui_port,
                plans_port=plans_port,
                gateway_port=gateway_port,
                user=user,
                console=out,
            )
        )  # returns once a SIGTERM has stopped everything
    except KeyboardInterrupt:
        pass
    out.print("stopped")


@app.command()
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

    config = settings()
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
        conversations = Conversations(await connect(config), config)
        out.print(f"gateway on http://{bind_host}:{bind_port} ({len(tokens)} token(s))")
        await run_gateway(conversations, tokens, bind_host, bind_port)

    try:
        run_async(work)
    except OSError as problem:
        raise fail(f"could not listen on {bind_host}:{bind_port}: {problem}") from None
    except KeyboardInterrupt:
        out.print("stopped")


@app.command("plans-service")
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


@app.command()
def worker() -> None:
    """Run a worker against TEMPORAL_ADDRESS with PARLEY_MODEL and PARLEY_TOOLS."""
    from parley.logs import configure_logging

    config = settings()
    configure_logging(config.log_format)
    # A bad configuration is reported before the cluster is even contacted.
    try:
        registry, model = load_tools_and_model(config, warn=warn)
    except ValueError as problem:
        raise fail(str(problem)) from None
    try:
        from parley.worker import run_worker

        run_async(lambda: run_worker(config, registry=registry, model=model))
    except KeyboardInterrupt:
        out.print("stopped")


@app.command()
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


@app.command()
def tools(as_json: AsJson = False) -> None:
    """List the worker's tools (PARLEY_TOOLS) with their policies, the policy file's
    subagents with the tools each may use, and its rules (PARLEY_POLICIES) in the
    order they are tried. No server needed."""
    from parley.tools import load_registry

    config = settings()
    try:
        registry = load_registry(config.tools, settings=config)
    except ValueError as problem:
        raise fail(str(problem)) from None
    catalogue = registry.catalogue()
    if as_json:
        print(json.dumps(catalogue.model_dump(mode="json"), indent=2))
        return
    for spec in catalogue.tools:
        out.print(Text.assemble((spec.name, "bold"), f"  {spec.policy}"))
        summary = spec.description.strip().splitlines()[0] if spec.description.strip() else ""
        if summary:
            out.print(Text(f"    {summary}", style="dim"))
    for subagent in catalogue.subagents:
        usable = [name for name in registry.names() if subagent.allows(name)]
        out.print(Text(f"subagent {subagent.name} may use only: {', '.join(usable)}", style="bold"))
    if not catalogue.rules:
        out.print(Text("no policy rules (PARLEY_POLICIES unset): each tool's own policy applies"))
        return
    out.print(Text(f"rules from {config.policies_file}, first match wins:", style="bold"))
    for rule in catalogue.rules:
        when = [f"{name}={pattern}" for name, pattern in rule.args.items()]
        window = " ".join(filter(None, [rule.days, rule.hours]))
        if window:
            offset = "" if rule.utc_offset == "+00:00" else f" UTC{rule.utc_offset}"
            when.append(("outside " if rule.outside else "within ") + window + offset)
        condition = f" when {', '.join(when)}" if when else ""
        timeout = ""
        if rule.timeout_seconds is not None or rule.on_timeout != "expire":
            after = f" after {rule.timeout_seconds:g} s" if rule.timeout_seconds else ""
            target = f" to {rule.escalate_to}" if rule.escalate_to else ""
            timeout = f"; undecided{after}: {rule.on_timeout}{target}"
        out.print(Text(f"  {rule.name}: {rule.tool}{condition} -> {rule.decide}{timeout}"))


def load_tools_and_model(
    settings: Settings, *, warn: Callable[[str], None]
) -> tuple[ToolRegistry, BaseChatModel]:
    """The worker's tools (``PARLEY_TOOLS``) and model (``PARLEY_MODEL``), loaded before
    anything starts. Whatever a toolset or a model factory raises becomes one
    ``ValueError`` naming the setting; a worker with no tools is ``warn``-ed about."""
    from parley.activities.models import build_chat_model
    from parley.tools import load_registry

    try:
        registry = load_registry(settings.tools, settings=settings)
    except ValueError:
        raise
    except Exception as problem:  # a toolset's own code may raise anything
        raise ValueError(
            f"PARLEY_TOOLS={settings.tools!r}: {type(problem).__name__}: {problem}"
        ) from None
    try:
        model = build_chat_model(settings.model, settings)
    except ValueError:
        raise
    except Exception as problem:  # so may a model factory
        raise ValueError(
            f"PARLEY_MODEL={settings.model!r}: {type(problem).__name__}: {problem}"
        ) from None
    if not len(registry):
        warn(
            f"no tools: PARLEY_TOOLS={settings.tools!r} loads none, so the model can only "
            "talk (set PARLEY_TOOLS=module:attr[,module:attr...])"
        )
    return registry, model


# --- conversations --------------------------------------------------------------------


@app.command()
def send(
    session: Session,
    user: User,
    text: Annotated[
        str | None,
        typer.Argument(
            help="The message. '-', or nothing when input is piped in, reads it from "
            "standard input."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", help="Read the message from this file (UTF-8).", dir_okay=False
        ),
    ] = None,
    message_id: Annotated[
        str | None,
        typer.Option(
            "--message-id",
            help="An id for this message: sending the same id again never applies it twice.",
        ),
    ] = None,
    reviewer: Annotated[
        list[str] | None,
        typer.Option(
            "--reviewer",
            help="A user who may read this conversation and decide on its calls "
            "(repeatable; only when this message starts the conversation).",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Send a message (starting the conversation if new) and print the turn's result.
    The message is TEXT, the file of --file, or standard input (TEXT '-', or piped in)."""
    try:
        check_identity(session, user)
    except ConversationRefused as refused:
        raise fail(refused.message) from None
    message = message_text(text, file)

    async def work() -> TurnResult:
        return await (await conversations(session, user)).send(
            session, user, message, message_id=message_id, reviewers=reviewer or ()
        )

    print_turn(run_async(work), as_json, session, user)


def message_text(text: str | None, file: Path | None) -> str:
    """The message to send: TEXT, or read from --file or standard input (as UTF-8, without
    its trailing newlines). An empty message is refused before anything is started."""
    if file is not None and text is not None:
        raise fail("give the message as TEXT or with --file, not both")
    if file is not None:
        try:
            raw, source = file.read_bytes(), str(file)
        except OSError as problem:
            raise fail(f"cannot read {file}: {problem.strerror or problem}") from None
    elif text == "-" or (text is None and sys.stdin is not None and not sys.stdin.isatty()):
        raw, source = sys.stdin.buffer.read(), "standard input"
    elif text is None:
        raise fail(
            "no message: give it as TEXT, with --file PATH, or on standard input "
            "(TEXT '-' or a pipe)"
        )
    else:
        raw, source = None, ""
    if raw is not None:
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as problem:
            raise fail(
                f"{source} is not UTF-8 text ({problem.reason} at byte {problem.start})"
            ) from None
    assert text is not None
    if not text.strip():
        raise fail("the message is empty")
    return text


Message = Annotated[
    str | None, typer.Option("--message", "-m", help="Why you reject them (the model is told).")
]


@app.command()
def approve(
    session: Session,
    user: User,
    call_ids: CallIds = None,
    all_matching: Annotated[
        str | None,
        typer.Option(
            "--all-matching",
            metavar="TOOL",
            help="Approve every pending call of TOOL (a shell-style pattern).",
        ),
    ] = None,
    remember: Remember = False,
    as_json: AsJson = False,
) -> None:
    """Approve pending tool calls: they run now."""
    decide(
        session,
        user,
        "approve",
        call_ids,
        tool_pattern=all_matching,
        remember=remember,
        as_json=as_json,
    )


@app.command()
def reject(
    session: Session,
    user: User,
    call_ids: CallIds = None,
    message: Message = None,
    remember: Remember = False,
    as_json: AsJson = False,
) -> None:
    """Reject pending tool calls: they never run (optional --message with the reason)."""
    decide(session, user, "reject", call_ids, message=message, remember=remember, as_json=as_json)


@app.command()
def respond(
    session: Session,
    user: User,
    message: Annotated[str, typer.Option("--message", "-m", help="The answer to give the model.")],
    call_ids: CallIds = None,
    as_json: AsJson = False,
) -> None:
    """Answer pending tool calls yourself (--message): the tool does not run."""
    if not message.strip():
        raise fail("respond needs --message with the answer to give the model")
    decide(session, user, "respond", call_ids, message=message, as_json=as_json)


@app.command()
def edit(
    session: Session,
    user: User,
    args: Annotated[str, typer.Option("--args", help="The new arguments, a JSON object.")],
    call_id: Annotated[
        str | None,
        typer.Argument(help="The tool call to edit; optional when only one is pending."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Run a pending tool call with new arguments (--args JSON)."""
    new_args = parse_args_option(args)
    decide(session, user, "edit", [call_id] if call_id else None, args=new_args, as_json=as_json)


def decide(
    session: str,
    user: str,
    action: DecisionAction,
    call_ids: list[str] | None,
    *,
    message: str | None = None,
    args: dict[str, Any] | None = None,
    tool_pattern: str | None = None,
    remember: bool = False,
    as_json: bool,
) -> None:
    if tool_pattern is not None and call_ids:
        raise fail("give CALL_IDs or --all-matching TOOL, not both")

    async def work() -> TurnResult:
        conv = await conversations(session, user)
        pending = [] if call_ids else (await conv.state(session, user)).pending
        if tool_pattern is not None:
            pending = [p for p in pending if fnmatch.fnmatchcase(p.name, tool_pattern)]
            if not pending:
                raise ConversationRefused(
                    f"no pending call in {session} is of a tool matching {tool_pattern!r}"
                )
        ids = call_ids or [p.tool_call_id for p in pending]
        if not ids:
            raise ConversationRefused(f"no tool call waits for a decision in {session}")
        if action == "edit" and len(ids) > 1:
            raise ConversationRefused(
                f"edit needs one CALL_ID when {len(ids)} calls are pending: {', '.join(ids)}"
            )
        decisions = [
            Decision(tool_call_id=i, action=action, args=args, message=message, remember=remember)
            for i in ids
        ]
        return await conv.decide(session, user, decisions)

    print_turn(run_async(work), as_json, session, user)


@app.command()
def show(
    session: Session,
    user: User,
    offset: Annotated[
        int | None,
        typer.Option(help="First message to show (0 is the first); default: the latest.", min=0),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(help="How many messages (and latest audit entries) to show.", min=1, max=1000),
    ] = 50,
    as_json: AsJson = False,
) -> None:
    """Show a conversation: status, pending calls, a page of the transcript, audit log."""

    async def work() -> Any:
        conv = await conversations(session, user)
        snapshot = await conv.state(
            session,
            user,
            StateQuery(
                user_id=user, transcript_offset=offset, transcript_limit=limit, audit_limit=limit
            ),
        )
        if offset is not None and offset < snapshot.transcript_offset:
            older = await conv.transcript(session, user, offset, limit)
            snapshot = snapshot.model_copy(
                update={"transcript": older, "transcript_offset": offset}
            )
        return snapshot

    snapshot = run_async(work)
    if as_json:
        print(snapshot.model_dump_json(indent=2))
        return
    print_snapshot(snapshot, out, audit=True, hint=True)


@app.command("list")
def list_(
    user: User,
    limit: Annotated[
        int, typer.Option(help="Show at most this many conversations.", min=1, max=1000)
    ] = 50,
    reviewing: Annotated[
        bool,
        typer.Option(
            "--reviewing", help="Conversations of others that name you a reviewer, instead."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """List your conversations (from Temporal's visibility; no worker needed): those
    waiting for your decision first, then the others, the most recent first."""
    try:
        check_user_id(user)
    except ValueError as problem:
        raise fail(str(problem)) from None

    async def work() -> list[ConversationSummary]:
        config = settings()
        return await Conversations(await connect(config), config).list(user, reviewing=reviewing)

    found = run_async(work)
    shown = found[:limit]
    if as_json:
        print(json.dumps([c.model_dump(mode="json") for c in shown], indent=2))
        return
    if not found:
        out.print(
            Text(
                f"no conversations for {user} to review"
                if reviewing
                else f"no conversations of {user}"
            )
        )
        return
    rows = [("SESSION", "STATUS", "PENDING TOOLS", "STARTED (UTC)", "LAST ACTIVITY (UTC)")]
    for c in shown:
        rows.append(
            (
                c.session_id,
                c.status,
                ",".join(c.pending_tools) or "-",
                c.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                c.last_activity_at.strftime("%Y-%m-%d %H:%M:%S"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for number, row in enumerate(rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        out.print(Text(f"{line}  {row[-1]}", style="bold" if number == 0 else ""))
    if len(found) > len(shown):
        out.print(Text(f"({len(found) - len(shown)} more; see them with --limit)", style="dim"))


@app.command()
def events(
    session: Session,
    user: User,
    after: Annotated[int, typer.Option(help="Print events with offset greater than this.")] = -1,
) -> None:
    """Print the conversation's AG-UI events as JSON lines (offset, event)."""

    async def work() -> Any:
        return await (await conversations(session, user)).events(session, user, after)

    for item in run_async(work).events:
        print(item.model_dump_json())


@app.command()
def end(
    session: Session,
    user: User,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Terminate it now, in any state and with no worker running; pending calls "
            "never run.",
        ),
    ] = False,
) -> None:
    """End a conversation once its in-flight work is done (pending calls never run)."""

    async def work() -> Any:
        conv = await conversations(session, user)
        if force:
            return await conv.force_end(session, user)
        return await conv.end(session, user)

    run_async(work)
    out.print(Text(f"conversation {session} {'was terminated' if force else 'is ending'}"))


@app.command()
def chat(session: Session, user: User) -> None:
    """Talk to a conversation; answer approval prompts with approve/edit/reject/respond
    (a/e/r/s). /show shows the conversation; /quit, Ctrl-D or Ctrl-C leaves."""
    from parley.chat import run_chat

    try:
        code = run_chat(session, user, settings(), console=out)
    except ConversationRefused as refused:
        raise fail(refused.message) from None
    except (ValueError, FileNotFoundError) as problem:
        raise fail(str(problem)) from None
    raise typer.Exit(code)


def print_turn(
    result: TurnResult, as_json: bool, session: str | None = None, user: str | None = None
) -> None:
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        render_turn(result, out)
        print_pending(result.pending, out, session=session, user=user)
    if result.status == "failed":
        err.print(Text.assemble(("turn failed: ", "bold red"), result.error or ""))
        raise typer.Exit(1)


# --- arguments ------------------------------------------------------------------------


def parse_args_option(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as problem:
        raise fail(f"--args is not JSON: {problem.msg} at character {problem.pos}") from None
    if not isinstance(value, dict):
        raise fail('--args must be a JSON object, e.g. \'{"branch_slug": "my-change"}\'')
    return value


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
