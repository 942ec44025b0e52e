"""The ``parley`` console script's app and what every command shares: the consoles,
one-line errors, settings, a client for a conversation, and the common options. Client
side; no workflow logic here. The commands are in this package's modules by area and are
registered, in their help order, by ``parley.cli``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
import typer.main
from rich.console import Console
from rich.text import Text

from parley.cli.rendering import print_pending, render_turn
from parley.client import ConversationRefused, Conversations, check_identity, connect
from parley.config.settings import Settings
from parley.contracts import Awaiting, StateQuery, TurnResult
from parley.observability import tracing


class _Cli(typer.Typer):
    """The console script. It ends the process with ``os._exit`` once the command is
    done and its output flushed: the Temporal client's Rust threads can otherwise crash
    interpreter teardown ("Fatal Python error: PyGILState_Release", exit -6) after the
    command has already succeeded (temporalio/sdk-python#300). ``os._exit`` skips
    ``atexit``, so the spans still batched are exported first (``tracing.shutdown``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        as_paragraphs(self)
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as done:
            code = done.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        if traces_lost := tracing.shutdown():
            print(f"warning: {traces_lost}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def as_paragraphs(typer_app: typer.Typer) -> None:
    """Each command's docstring as paragraphs for Rich to wrap to the terminal: the
    lines of a paragraph are joined (Typer joins those of the first one only), so no
    line is broken where the source was."""
    for info in typer_app.registered_commands:
        doc = info.callback.__doc__ if info.callback else None
        if doc and info.help is None and info.callback is not None:
            paragraphs = inspect.cleandoc(doc).split("\n\n")
            info.callback.__doc__ = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            as_paragraphs(group.typer_instance)


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


def run_async(work: Callable[[], Awaitable[T]], *, serves: bool = False) -> T:
    """Run a command's work; a command that does not serve (``dev``, ``worker``,
    ``gateway`` do) is one span when tracing is on, so its client calls are one trace."""
    try:
        if serves:
            return asyncio.run(work())  # type: ignore[arg-type]
        tracing.configure(settings(), "cli")
        with tracing.command_span(command_name(sys.argv[1:])):
            return asyncio.run(work())  # type: ignore[arg-type]
    except ConversationRefused as refused:
        raise fail(refused.message) from None
    except (ValueError, FileNotFoundError) as problem:
        raise fail(str(problem)) from None


def command_name(argv: list[str]) -> str:
    """The command ``argv`` runs (``parley store gc``): its leading words that name
    commands, never its arguments (a message's text is no span's name)."""
    words, group = ["parley"], typer.main.get_command(app)
    for word in argv:
        command = getattr(group, "commands", {}).get(word)  # a group has commands
        if command is None:
            break
        words.append(word)
        group = command
    return " ".join(words)


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


def print_turn(
    result: TurnResult,
    as_json: bool,
    session: str | None = None,
    user: str | None = None,
    *,
    reply_streamed: bool = False,
    awaiting: list[Awaiting] | None = None,
) -> None:
    """The turn, and its pending calls with the hint for ``user``: ``awaiting`` (the
    gate's view for them), read here when a call waits for a reviewer and none is given."""
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        render_turn(result, out, reply_streamed=reply_streamed)
        reviewed = any(call.reviewer_rule for call in result.pending)
        if reviewed and awaiting is None and session and user:
            awaiting = asyncio.run(awaiting_of(session, user))
        print_pending(result.pending, out, session=session, user=user, awaiting=awaiting)
    if result.status == "failed":
        err.print(Text.assemble(("turn failed: ", "bold red"), result.error or ""))
        raise typer.Exit(1)


async def awaiting_of(session: str, user: str) -> list[Awaiting] | None:
    """Who the conversation's calls wait for, as ``user`` reads it; None if it cannot
    be read now (the hint is then the general one)."""

    async def read() -> list[Awaiting]:
        conv = await conversations(session, user)
        return (await conv.state(session, user, StateQuery(user_id=user, audit_limit=0))).awaiting

    try:
        return await asyncio.wait_for(read(), timeout=5)
    except Exception:  # only a hint depends on it
        return None
