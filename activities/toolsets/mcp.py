"""Tools from MCP servers, behind the same gate. Activity side.

``PARLEY_TOOLS=parley.activities.toolsets.mcp:toolset`` loads every tool of the MCP
servers named in ``PARLEY_MCP_SERVERS``: a JSON file of connections as
``langchain-mcp-adapters``' ``MultiServerMCPClient`` takes them, e.g.::

    {"notes": {"transport": "streamable_http", "url": "http://127.0.0.1:8000/mcp"},
     "files": {"transport": "stdio", "command": "python", "args": ["files_server.py"],
               "tool_name_prefix": true}}

``"tool_name_prefix": true`` (Parley's per-server form of the adapter's option of that
name) names a server's tools ``<server>_<tool>`` (``files_read`` for ``read``): two
servers that have a tool of the same name cannot both be loaded without it.

Each tool becomes a ``confirm`` tool: it waits for the user's decision, whatever the
server's annotations say (they are hints from the server, not a policy). The policy
file (``PARLEY_POLICIES``) makes some ``auto`` or ``deny`` like any other tool, per
tool and per argument. A tool has no preview unless the policy file names one: a
``[[preview]]`` table giving a read-only tool of the same server, whose answer is the
preview (``parley.tools.mcp_previews``; it reads the ``readOnlyHint`` annotation the
adapter keeps in the tool's ``metadata``). A tool runs in the ``run_tool`` activity
like the others, and what the server answers is mapped here onto the error table that
``tool_failure`` applies (``mcp_failure``):

- an ``isError`` result is a ``ToolException`` with the server's text: the model reads
  it as an input error;
- a server that cannot be started or reached, or that closes the connection, is a
  ``TransientError``: Temporal retries the call;
- a JSON-RPC error the server answers (unknown tool, invalid params) is a
  ``ToolException`` too; an HTTP status is mapped as the other REST tools map it.

Exception groups (the MCP SDK's task groups wrap every transport failure) are unwrapped
to their cause first. A result's text content reaches the model as text; a non-text
block (an image, a file) as one JSON line in its place.

MCP has no idempotency key: a call retried after a worker died mid-call, or after the
server closed the connection mid-call, reaches the server again. Give ``confirm`` MCP
tools to servers whose writes are idempotent, or that can take the key from the
arguments. A server that failed to start never saw the call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED

from parley.contracts.errors import ToolPermissionError, TransientError, is_transient_status
from parley.tools import SERVER_METADATA, ParleyTool, confirm
from parley.tools.loading import McpConfig, factory, read_config_file

#: How long the worker waits, at start, for the servers to list their tools.
LOAD_SECONDS = 60.0

#: The per-server option Parley reads from a connection (the adapter never sees it).
PREFIX_OPTION = "tool_name_prefix"

#: Failures that mean the server was not reached (not started, refused, gone away).
_UNREACHED = (
    OSError,
    TimeoutError,
    httpx.TransportError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


@dataclass(frozen=True)
class McpServer:
    name: str
    #: How to reach it; its headers or environment may hold a token: never in a repr.
    connection: dict[str, Any] = field(repr=False)
    tool_name_prefix: bool = False


class McpServerError(RuntimeError):
    """A server failed in a way neither the model nor a retry can help with."""


def read_servers(path: str) -> list[McpServer]:
    file = Path(path)
    connections = read_config_file(file, "PARLEY_MCP_SERVERS", "JSON")
    if not isinstance(connections, dict) or not all(
        isinstance(name, str) and isinstance(spec, dict) and "transport" in spec
        for name, spec in connections.items()
    ):
        raise ValueError(
            f"PARLEY_MCP_SERVERS: {file} must map server names to connections with a "
            '"transport" ("streamable_http" with "url", or "stdio" with "command")'
        )
    servers = []
    for name, spec in connections.items():
        connection = dict(spec)
        prefix = connection.pop(PREFIX_OPTION, False)
        if not isinstance(prefix, bool):
            raise ValueError(
                f'PARLEY_MCP_SERVERS: {file}: server {name!r}: "{PREFIX_OPTION}" must be '
                f"true or false, not {json.dumps(prefix)}"
            )
        servers.append(McpServer(name, connection, prefix))
    return servers


def load_mcp_tools(servers: list[McpServer]) -> list[BaseTool]:
    """Every tool of every server, listed once at start; two tools of one name are
    refused, naming both servers. Listing is async and a worker may load its tools
    inside or outside an event loop, so it runs on a thread of its own; each later call
    opens its own session from the same connection."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        listed = pool.submit(asyncio.run, _list_all(servers)).result()
    failed = [
        f"{server.name}: {_reason(tools)}"
        for server, tools in zip(servers, listed, strict=True)
        if isinstance(tools, BaseException)
    ]
    if failed:
        raise ValueError(f"PARLEY_MCP_SERVERS: could not list the tools of {'; '.join(failed)}")
    owner: dict[str, McpServer] = {}
    loaded: list[BaseTool] = []
    for server, tools in zip(servers, listed, strict=True):
        assert isinstance(tools, list)
        for tool in tools:
            first = owner.setdefault(tool.name, server)
            if first is not server:
                raise ValueError(_collision(tool.name, first, server))
            loaded.append(_as_parley_call(tool, server.name))
    return loaded


async def _list_all(servers: list[McpServer]) -> list[list[BaseTool] | BaseException]:
    async def listing(server: McpServer) -> list[BaseTool]:
        listed = _served_tools(server)
        try:
            return await asyncio.wait_for(listed, LOAD_SECONDS)
        except TimeoutError:
            raise TimeoutError(f"no answer in {LOAD_SECONDS:.0f} s") from None

    return await asyncio.gather(*(listing(s) for s in servers), return_exceptions=True)


async def _served_tools(server: McpServer) -> list[BaseTool]:
    """The server's tools, listed in one session whose ``initialize`` answer says the
    server's version: each tool carries ``name@version`` (``SERVER_METADATA``, then
    ``ToolSpec.server``), so a remembered decision is for that version (``grants``).
    Each later call opens its own session from the same connection."""
    from langchain_mcp_adapters.sessions import create_session
    from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool

    described: list[Any] = []
    async with create_session(server.connection) as session:  # type: ignore[arg-type]
        info = await session.initialize()
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor)
            described.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
    served = {SERVER_METADATA: f"{server.name}@{info.serverInfo.version}"}
    tools = []
    for mcp_tool in described:
        tool = convert_mcp_tool_to_langchain_tool(
            None,
            mcp_tool,
            connection=server.connection,  # type: ignore[arg-type]
            server_name=server.name,
            tool_name_prefix=server.tool_name_prefix,
            # An isError result is raised, so mcp_failure makes it a tool error.
            handle_tool_errors=False,
        )
        tool.metadata = {**(tool.metadata or {}), **served}
        tools.append(tool)
    return tools


def _collision(tool: str, first: McpServer, second: McpServer) -> str:
    clash = f"PARLEY_MCP_SERVERS: servers {first.name!r} and {second.name!r} both have a tool "
    unprefixed = next((s for s in (first, second) if not s.tool_name_prefix), None)
    if unprefixed is None:  # e.g. server "a" with "b_c" and server "a_b" with "c"
        return f"{clash}named {tool!r} once prefixed: rename one of the servers"
    return (
        f'{clash}named {tool!r}: set "{PREFIX_OPTION}": true on {unprefixed.name!r} (its '
        f"tools are then named {unprefixed.name}_<tool>)"
    )


def _as_parley_call(tool: BaseTool, server: str) -> BaseTool:
    """The adapter's tool, with its result's text as text and its failures mapped."""
    assert isinstance(tool, StructuredTool) and tool.coroutine is not None
    call_server: Callable[..., Awaitable[tuple[Any, Any]]] = tool.coroutine

    async def call(**arguments: Any) -> tuple[Any, Any]:
        try:
            content, artifact = await call_server(**arguments)
        except Exception as err:
            cause = innermost(err)
            failure = mcp_failure(server, cause)
            # Chained to the cause alone: a cycle (the cause as its own cause, or a group
            # holding it) would make Temporal's failure converter recurse without end.
            raise failure from (None if failure is cause else cause)
        return content_text(content), artifact

    return tool.model_copy(update={"coroutine": call})


def innermost(err: BaseException) -> BaseException:
    """The cause under the exception groups (task groups wrap connection errors)."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = next(
            (e for e in err.exceptions if not isinstance(e, asyncio.CancelledError)),
            err.exceptions[0],
        )
    return err


def mcp_failure(server: str, err: BaseException) -> Exception:
    """What a call to ``server`` raised, as the error ``tool_failure`` maps (see the
    module docstring)."""
    cause = innermost(err)
    reason = _reason(cause)
    if isinstance(cause, ToolException):
        return cause  # an isError result: the server's own words
    if isinstance(cause, McpError):
        if cause.error.code in (CONNECTION_CLOSED, httpx.codes.REQUEST_TIMEOUT):
            return TransientError(f"MCP server {server!r} could not be reached: {reason}")
        return ToolException(f"MCP server {server!r} refused the call: {cause.error.message}")
    if isinstance(cause, httpx.HTTPStatusError):
        status = cause.response.status_code
        message = f"MCP server {server!r} answered HTTP {status}"
        if is_transient_status(status):
            after = cause.response.headers.get("retry-after", "")
            retry_after = float(after) if after.isdigit() else None
            return TransientError(message, http_status=status, retry_after=retry_after)
        if status in (401, 403):
            return ToolPermissionError(message, http_status=status)
        return McpServerError(message)
    if isinstance(cause, _UNREACHED):
        return TransientError(f"MCP server {server!r} could not be reached: {reason}")
    return McpServerError(f"MCP server {server!r}: {reason}")


def _reason(err: BaseException) -> str:
    cause = innermost(err)
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def content_text(content: Any) -> Any:
    """A result's content blocks as the model reads them: the text of each text block,
    and each other block (an image, a file) as one JSON line in its place."""
    if not isinstance(content, list):
        return content
    lines = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            lines.append(str(block.get("text", "")))
        elif isinstance(block, dict):
            # The adapter's block ids are random: they would only make results differ.
            lines.append(json.dumps({k: v for k, v in block.items() if k != "id"}))
        else:
            lines.append(str(block))
    return "\n".join(lines)


@factory(McpConfig)
def toolset(config: McpConfig) -> list[ParleyTool]:
    """The toolset for ``PARLEY_TOOLS=parley.activities.toolsets.mcp:toolset``, from its
    own config (``PARLEY_MCP_SERVERS``)."""
    if not config.servers:
        raise ValueError(
            "PARLEY_MCP_SERVERS is not set: name a JSON file of MCP server connections"
        )
    return [confirm(tool) for tool in load_mcp_tools(read_servers(config.servers))]
