"""The ``parley`` command line. Client side: it talks to conversations through
``parley.client`` and starts servers (``dev``, ``worker``); no workflow logic here.

Every command has ``--help``. Scriptable commands print JSON with ``--json``; a refused
command exits 1 with one clear line on stderr. ``TEMPORAL_ADDRESS`` and
``PARLEY_TASK_QUEUE`` pick the cluster and the worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from parley.client import ConversationRefused, Conversations, check_identity, connect
from parley.contracts import Decision, DecisionAction, StateQuery, TurnResult
from parley.settings import Settings


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
out = Console()
err = Console(stderr=True)
T = TypeVar("T")

Session = Annotated[str, typer.Option("--session", "-s", help="Conversation (session) id.")]
User = Annotated[str, typer.Option("--user", "-u", help="Your user id (required, not 'default').")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
CallIds = Annotated[
    list[str] | None,
    typer.Argument(help="Tool call ids to decide; none means every pending call."),
]


def fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


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
) -> None:
    """Run everything locally: Temporal dev server with UI, demo git projects, the
    reference plans service, and a worker with the offline model."""
    from parley.dev import run_dev

    try:
        run_async(
            lambda: run_dev(
                data_dir.resolve(),
                port=port,
                ui_port=ui_port,
                plans_port=plans_port,
                console=out,
            )
        )  # returns once a SIGTERM has stopped everything
    except KeyboardInterrupt:
        pass
    out.print("stopped")


@app.command("plans-service")
def plans_service(
    db: Annotated[Path, typer.Option(help="SQLite database file.")] = Path("plans.db"),
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """Run the reference plans REST service (API key from PARLEY_PLANS_API_KEY)."""
    from parley.plans_service import serve

    api_key = os.environ.get("PARLEY_PLANS_API_KEY", "").strip()
    if not api_key:
        raise fail("set PARLEY_PLANS_API_KEY: clients must send it as a bearer token")
    serve(host, port, db.resolve(), api_key)


@app.command()
def worker() -> None:
    """Run a worker against TEMPORAL_ADDRESS with PARLEY_MODEL and PARLEY_TOOLS."""
    import logging

    from worker import run_worker

    logging.basicConfig(level=logging.INFO)
    try:
        run_async(lambda: run_worker(settings()))
    except KeyboardInterrupt:
        out.print("stopped")


# --- conversations --------------------------------------------------------------------


@app.command()
def send(
    text: Annotated[str, typer.Argument(help="The message.")],
    session: Session,
    user: User,
    message_id: Annotated[
        str | None,
        typer.Option(
            "--message-id",
            help="An id for this message: sending the same id again never applies it twice.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Send a message (starting the conversation if new) and print the turn's result."""

    async def work() -> TurnResult:
        return await (await conversations(session, user)).send(
            session, user, text, message_id=message_id
        )

    print_turn(run_async(work), as_json)


Message = Annotated[
    str | None, typer.Option("--message", "-m", help="Why you reject them (the model is told).")
]


@app.command()
def approve(
    session: Session, user: User, call_ids: CallIds = None, as_json: AsJson = False
) -> None:
    """Approve pending tool calls: they run now."""
    decide(session, user, "approve", call_ids, as_json=as_json)


@app.command()
def reject(
    session: Session,
    user: User,
    call_ids: CallIds = None,
    message: Message = None,
    as_json: AsJson = False,
) -> None:
    """Reject pending tool calls: they never run (optional --message with the reason)."""
    decide(session, user, "reject", call_ids, message=message, as_json=as_json)


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
    as_json: bool,
) -> None:
    async def work() -> TurnResult:
        conv = await conversations(session, user)
        ids = call_ids or [p.tool_call_id for p in (await conv.state(session, user)).pending]
        if not ids:
            raise ConversationRefused(f"no tool call waits for a decision in {session}")
        if action == "edit" and len(ids) > 1:
            raise ConversationRefused(
                f"edit needs one CALL_ID when {len(ids)} calls are pending: {', '.join(ids)}"
            )
        decisions = [
            Decision(tool_call_id=i, action=action, args=args, message=message) for i in ids
        ]
        return await conv.decide(session, user, decisions)

    print_turn(run_async(work), as_json)


@app.command()
def show(
    session: Session,
    user: User,
    offset: Annotated[
        int | None,
        typer.Option(help="First message to show (0 is the first); default: the latest.", min=0),
    ] = None,
    limit: Annotated[int, typer.Option(help="How many messages to show.", min=1, max=1000)] = 50,
    as_json: AsJson = False,
) -> None:
    """Show a conversation: status, pending calls, a page of the transcript, audit log."""

    async def work() -> Any:
        conv = await conversations(session, user)
        snapshot = await conv.state(
            session,
            user,
            StateQuery(user_id=user, transcript_offset=offset, transcript_limit=limit),
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
    out.print(
        f"[bold]{escape(snapshot.session_id)}[/] ({escape(snapshot.user_id)}): {snapshot.status}"
    )
    first, total = snapshot.transcript_offset, snapshot.transcript_total
    if first > 0 or first + len(snapshot.transcript) < total:
        out.print(
            f"[dim]messages {first}-{first + len(snapshot.transcript) - 1} of {total}; "
            "page with --offset/--limit[/]"
        )
    for message in snapshot.transcript:
        out.print(f"[dim]{message.type:>6}[/] {escape(message.text[:300])}", highlight=False)
        for tool_call in getattr(message, "tool_calls", []) or []:
            out.print(escape(f"       → {tool_call['name']} {json.dumps(tool_call['args'])}"))
    print_pending(snapshot.pending)


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
    out.print(f"conversation {session} {'was terminated' if force else 'is ending'}")


@app.command()
def chat(session: Session, user: User) -> None:
    """Talk to a conversation; answer approval prompts with approve/edit/reject/respond."""
    from parley.chat import run_chat

    run_async(lambda: run_chat(session, user, settings(), console=out))


# --- output ---------------------------------------------------------------------------


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


def print_turn(result: TurnResult, as_json: bool) -> None:
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        for item in result.results:
            colour = "green" if item.status == "success" else "yellow"
            out.print(f"[{colour}]{item.status}[/] {item.name} ({escape(item.tool_call_id)})")
        if result.reply:
            out.print(result.reply, highlight=False, markup=False)
        print_pending(result.pending)
    if result.status == "failed":
        err.print(f"[bold red]turn failed:[/] {escape(result.error or '')}", highlight=False)
        raise typer.Exit(1)


def print_pending(pending: list[Any]) -> None:
    if not pending:
        return
    table = Table(title="Waiting for your decision", title_justify="left")
    for column in ("call id", "tool", "args", "expires"):
        table.add_column(column)
    for call in pending:
        table.add_row(
            call.tool_call_id,
            call.name,
            json.dumps(call.args, ensure_ascii=False),
            call.expires_at.strftime("%Y-%m-%d %H:%M UTC"),
        )
    out.print(table)
    out.print(
        "Decide with: parley approve|edit|reject|respond --session … --user … [CALL_ID…]",
        markup=False,
    )


def main() -> None:  # pragma: no cover - console script entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
