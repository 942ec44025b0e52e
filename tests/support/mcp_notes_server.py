"""A real MCP server for the MCP tests (``tests/test_mcp.py``): FastMCP over streamable
HTTP on 127.0.0.1. ``add_note`` appends to the file ``$NOTES_FILE`` (a side effect the
test reads directly); ``list_notes`` reads it; ``fail`` answers an MCP error."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP

NOTES = Path(os.environ["NOTES_FILE"])
server = FastMCP("notes", host="127.0.0.1", port=int(sys.argv[1]))


@server.tool()
def add_note(text: str) -> str:
    """Add a note (changes the world)."""
    with NOTES.open("a", encoding="utf-8") as out:
        out.write(text + "\n")
    return f"noted: {text}"


@server.tool()
def list_notes() -> str:
    """List the notes."""
    return NOTES.read_text(encoding="utf-8") if NOTES.exists() else ""


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise ValueError(reason)


if __name__ == "__main__":
    server.run(transport="streamable-http")
