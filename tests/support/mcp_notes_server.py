"""A real MCP server for the MCP tests: FastMCP over streamable HTTP on 127.0.0.1
(``mcp_notes_server.py <port>``, ``tests/test_mcp.py``) or over stdio
(``mcp_notes_server.py stdio``, ``tests/test_mcp_previews.py``). ``add_note`` appends to
the file ``$NOTES_FILE`` (a side effect the test reads directly); ``list_notes`` reads
it; ``fail`` answers an MCP error. None of them carries annotations. Its ``initialize``
answer gives the version ``$NOTES_VERSION`` (default ``1.0.0``; ``tests/test_grants.py``).

With ``NOTES_READERS=1`` it also has the tools the preview tests name: ``find_notes``
(annotated read-only), ``find_fails`` (annotated read-only, always an MCP error) and
``erase_notes`` (annotated as a destructive write). Like a strict server, it refuses a
call with an argument its tool does not declare, so a preview that sent the call's
other arguments would fail."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations

NOTES = Path(os.environ["NOTES_FILE"])
STDIO = sys.argv[1] == "stdio"


class StrictServer(FastMCP):
    """FastMCP, refusing arguments a tool does not declare (FastMCP ignores them)."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        tool = self._tool_manager.get_tool(name)
        declared = tool.parameters.get("properties", {}) if tool is not None else {}
        unknown = sorted(set(arguments) - set(declared))
        if tool is not None and unknown:
            raise ToolError(f"{name} takes no argument {', '.join(unknown)}")
        return await super().call_tool(name, arguments)


server = (
    # Over stdio its stderr is the client's (a CLI's): it logs only what went wrong.
    StrictServer("notes", log_level="WARNING")
    if STDIO
    else StrictServer("notes", host="127.0.0.1", port=int(sys.argv[1]))
)
server._mcp_server.version = os.environ.get("NOTES_VERSION", "1.0.0")


def lines() -> list[str]:
    return NOTES.read_text(encoding="utf-8").splitlines() if NOTES.exists() else []


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


if os.environ.get("NOTES_READERS") == "1":

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def find_notes(text: str) -> str:
        """The notes that contain the text (reads only)."""
        found = [line for line in lines() if text in line]
        return "\n".join(found) if found else f"no note contains {text!r}"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def find_fails(text: str) -> str:
        """Declared read-only, and always fails."""
        raise ValueError(f"the index of notes is unavailable (looking for {text!r})")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def erase_notes(text: str, reason: str) -> str:
        """Erase the notes that contain the text, saying why (changes the world)."""
        kept = [line for line in lines() if text not in line]
        NOTES.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        return f"erased the notes with {text!r} ({reason})"


if __name__ == "__main__":
    server.run(transport="stdio" if STDIO else "streamable-http")
