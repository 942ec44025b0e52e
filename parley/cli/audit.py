"""``parley audit``: export a conversation's audit log as JSON lines, chained by hash,
and verify such an export. Client side (``parley.client.audit`` reads the conversation; the
chain is the workflow's).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from parley.cli.app import conversations, err, fail, out, run_async
from parley.client.audit import AuditLog, BrokenExport, export_lines, read_log, verify, verify_live


def audit(
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Conversation (session) id.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Your user id (the owner or a reviewer).")
    ] = None,
    format_: Annotated[
        str, typer.Option("--format", help="Export format: jsonl (the only one).")
    ] = "jsonl",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the export here, not stdout.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Verify an export (--file, or stdin) instead: every entry's hash, the chain "
            "from the header's anchor to its head; with --session and --user, also against "
            "the conversation itself.",
        ),
    ] = False,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="The export to verify ('-': stdin).")
    ] = None,
) -> None:
    """Export every audit entry the conversation had (who decided what, when, on which
    arguments, by which channel), one JSON object a line after a header, each chained to
    the one before by hash; or, with --verify, check an export and name the first line
    that was altered, removed or added."""
    if format_ != "jsonl":
        raise fail(f"unknown --format {format_!r}; the export format is jsonl")
    if check:
        _verify(file, session, user)
        return
    if session is None or user is None:
        raise fail("give --session and --user to export (or --verify --file F to check one)")

    async def work() -> AuditLog:
        return await read_log(await conversations(session, user), session, user)

    lines = export_lines(run_async(work))
    text = "".join(line + "\n" for line in lines)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        out.print(f"wrote {len(lines) - 1} entries of {session} to {output}")


def _verify(file: Path | None, session: str | None, user: str | None) -> None:
    at_terminal = sys.stdin is not None and sys.stdin.isatty()
    if file is None and at_terminal:  # nothing piped in: it would wait, saying nothing
        raise fail(
            "--verify reads an export: give --file FILE, or pipe one in "
            "(parley audit -s S -u U | parley audit --verify)"
        )
    if file is None or str(file) == "-":
        if at_terminal:
            err.print("reading the export from standard input; end it with Ctrl-D")
        lines = sys.stdin.read().splitlines()
    else:
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except OSError as problem:
            raise fail(f"cannot read {file}: {problem.strerror}") from None
    try:
        verified = verify(lines)
    except BrokenExport as broken:
        raise fail(f"the export does not verify: {broken}") from None
    if user is not None:
        who = session or verified.session_id

        async def work() -> AuditLog:
            return await read_log(await conversations(who, user), who, user)

        problem, shared = verify_live(verified, run_async(work))
        if problem is not None:
            raise fail(f"the export does not match the conversation: {problem}")
        out.print(
            f"{verified.summary()}; {shared} entries match the conversation's, up to its head"
        )
        return
    out.print(
        f"{verified.summary()} (offline: entries cut off its end, with the header rewritten "
        "to match, show only against the conversation: add --session and --user)"
    )
