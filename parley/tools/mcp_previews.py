"""Previews of MCP tools, named by the policy file. Worker side: checked when the worker
loads its tools; the preview made here runs in the ``preview_call`` activity.

An MCP tool has no preview unless the policy file (``PARLEY_POLICIES``) names one for it:
a read-only tool of the same server, whose answer is the preview::

    [[preview]]
    tool = "erase_notes"     # an MCP tool
    with = "find_notes"      # a tool of the same server, annotated readOnlyHint: true

The preview tool is called with the call's canonical arguments restricted to the names
its input schema declares (``erase_notes(text, reason)`` previews as
``find_notes(text)``); its text answer is the preview's data, ``{"find_notes": "..."}``,
bounded like a result. The call's ``ToolSpec`` then says ``has_preview``, so the workflow
computes it when the call waits and again before an approval applies: a changed answer
refuses the approval. A preview tool that fails (an error result, a server that is down
or closes the connection) gives a ``failed`` preview; it never blocks a decision.

Refused at load, in one line naming the file, the table and the fix: a name that is no
tool of the worker; a ``tool`` that is not an MCP tool (a built-in tool declares its
preview in code, ``confirm(tool, preview=...)``); a second table for one tool; a
``with`` tool of another server; one the server does not annotate ``readOnlyHint: true``
(a server that gives no annotations for it says nothing about what it changes); one
that requires an argument ``tool`` does not take (its preview could never succeed).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.tools import ToolException

from parley.contracts import ToolContext
from parley.tools.declarations import SERVER_METADATA, ParleyTool, Previewer
from parley.tools.policies import PolicyFileError, PreviewTable

#: The MCP annotation a preview tool must carry as ``true``.
READ_ONLY = "readOnlyHint"


def with_previews(
    tools: Sequence[ParleyTool], tables: Sequence[PreviewTable], file: str | Path
) -> list[ParleyTool]:
    """``tools``, each MCP tool a ``[[preview]]`` table names given its preview; raises
    :class:`PolicyFileError` for a table that cannot be one (see the module docstring)."""
    path = Path(file)
    by_name = {tool.name: tool for tool in tools}
    previewed: dict[str, ParleyTool] = {}
    for table in tables:
        where = f"preview {table.tool!r}"
        target = _named(by_name, table.tool, "tool", where, path)
        reader = _named(by_name, table.reader, "with", where, path)
        problem = _problem(target, reader, previewed)
        if problem:
            raise PolicyFileError(path, where, problem)
        previewed[target.name] = dataclasses.replace(
            target, preview=_previewer(reader), preview_with=reader.name
        )
    return [previewed.get(tool.name, tool) for tool in tools]


def _named(
    by_name: dict[str, ParleyTool], name: str, key: str, where: str, file: Path
) -> ParleyTool:
    tool = by_name.get(name)
    if tool is not None:
        return tool
    close = difflib.get_close_matches(name, list(by_name), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise PolicyFileError(file, where, f"{key}: {name!r} is no tool of this worker{hint}")


def _problem(target: ParleyTool, reader: ParleyTool, previewed: dict[str, ParleyTool]) -> str:
    """Why ``reader`` cannot be ``target``'s preview, or nothing."""
    server = _server(target)
    if server is None:
        if target.preview is not None:
            return (
                f"tool: {target.name} declares its own preview in code; a [[preview]] is "
                "for an MCP tool, which has none: remove this table"
            )
        return (
            f"tool: {target.name} is not a tool of an MCP server; a built-in tool declares "
            "its preview in code (confirm(tool, preview=...)): remove this table"
        )
    if target.name in previewed:
        return f"tool: a [[preview]] before it already names {target.name}'s preview"
    reader_server = _server(reader)
    if reader_server != server:
        where = "no MCP server" if reader_server is None else f"server {_name(reader_server)!r}"
        return (
            f"with: {reader.name} is a tool of {where}, not of {_name(server)!r} like "
            f"{target.name}: name a read-only tool of {_name(server)!r}"
        )
    annotations = reader.tool.metadata or {}
    if READ_ONLY not in annotations:
        return (
            f"with: server {_name(server)!r} gives no annotations for {reader.name}, so "
            f"nothing says it only reads: name a tool it annotates {READ_ONLY}: true"
        )
    if annotations[READ_ONLY] is not True:
        hint = json.dumps(annotations[READ_ONLY], default=str)
        return (
            f"with: {reader.name} is not read-only (server {_name(server)!r} annotates "
            f"{READ_ONLY}: {hint}): name a tool it annotates {READ_ONLY}: true"
        )
    takes = _properties(target)
    missing = [name for name in _required(reader) if name not in takes]
    if missing:
        return (
            f"with: {reader.name} requires {', '.join(map(repr, missing))}, which "
            f"{target.name} does not take: its preview could never succeed"
        )
    return ""


def _previewer(reader: ParleyTool) -> Previewer:
    """The preview: ``reader``'s answer to the call's arguments it declares. What it
    raises (an error result, a server not reached) makes a failed preview
    (``ParleyTool.previewed``); an error result says what the server said, as
    ``find_notes failed: <its text>``."""
    declared = frozenset(_properties(reader))
    tool = reader.tool

    async def preview(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        try:
            answer = await tool.ainvoke({k: v for k, v in args.items() if k in declared})
        except ToolException as err:  # the adapter's own subclass: its words, not its name
            said = str(err).removeprefix(f"Error executing tool {tool.name}: ")  # FastMCP's
            raise ToolException(f"{tool.name} failed: {said}") from None
        return {tool.name: answer}

    return preview


def _server(tool: ParleyTool) -> str | None:
    """The MCP server serving ``tool`` (``name@version``), None for a built-in tool."""
    served = (tool.tool.metadata or {}).get(SERVER_METADATA)
    return served if isinstance(served, str) else None


def _name(server: str) -> str:
    return server.rpartition("@")[0] or server


def _properties(tool: ParleyTool) -> dict[str, Any]:
    properties = tool.spec().args_schema.get("properties")
    return properties if isinstance(properties, dict) else {}


def _required(tool: ParleyTool) -> list[str]:
    required = tool.spec().args_schema.get("required")
    return [str(name) for name in required] if isinstance(required, list) else []
