"""``parley result``: one tool call's result, whole, however long (the model and ``parley
show`` see a long one's beginning). Client side (``parley.client.results``); registered by
``parley.cli``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, BinaryIO

import typer
from rich.text import Text

from parley.cli.app import AsJson, Session, User, conversations, err, fail, run_async
from parley.client.results import WholeResult, whole_result

#: Written a piece at a time, so a result of megabytes never sits twice in memory as bytes.
CHUNK_CHARS = 1 << 16

Call = Annotated[
    str, typer.Option("--call", "-c", help="The tool call id (parley show lists them).")
]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Write the result to this file instead of standard output."
    ),
]


def result(
    session: Session, user: User, call: Call, output: Output = None, as_json: AsJson = False
) -> None:
    """Print a tool call's whole result (its content, as the tool returned it), or write it
    to --output; with --json, the whole envelope (status, content, payload, error)."""

    async def work() -> WholeResult:
        conv = await conversations(session, user)
        return await whole_result(conv, session, user, call)

    whole = run_async(work)
    envelope = whole.result
    text = (
        json.dumps(
            {"tool_call_id": whole.tool_call_id, "name": whole.name, **envelope.model_dump()},
            ensure_ascii=False,
            default=str,
        )
        if as_json
        else envelope.content
    )
    if output is None:
        _write(sys.stdout.buffer, text)
        if text and not text.endswith("\n") and sys.stdout.isatty():
            sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return
    try:
        with output.open("wb") as file:
            _write(file, text)
    except OSError as problem:
        raise fail(f"cannot write {output}: {problem.strerror or problem}") from None
    err.print(
        Text(
            f"wrote the {envelope.status} result of {whole.name} ({whole.tool_call_id}), "
            f"{len(text):,} characters, to {output}"
        )
    )


def _write(stream: BinaryIO, text: str) -> None:
    for start in range(0, len(text), CHUNK_CHARS):
        stream.write(text[start : start + CHUNK_CHARS].encode("utf-8"))
