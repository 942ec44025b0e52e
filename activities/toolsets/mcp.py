"""Tools from MCP servers, behind the same gate. Activity side.

``PARLEY_TOOLS=parley.activities.toolsets.mcp:toolset`` loads every tool of the MCP
servers named in ``PARLEY_MCP_SERVERS``: a JSON file of connections as
``langchain-mcp-adapters``' ``MultiServerMCPClient`` takes them, e.g.::

    {"notes": {"transport": "streamable_http", "url": "http://127.0.0.1:8000/mcp"},
     "files": {"transport": "stdio", "command": "python", "args": ["files_server.py"]}}

Each tool becomes a ``confirm`` tool: it waits for the user's decision, whatever the
server's annotations say (they are hints from the server, not a policy). The policy
file (``PARLEY_POLICIES``) makes some ``auto`` or ``deny`` like any other tool, per
tool and per argument. A tool runs in the ``run_tool`` activity like the others: same
retries, same error table (an MCP error result is a ``ToolException`` the model
reads; a server that cannot be reached is retried).

MCP has no idempotency key: a call retried after a worker died mid-call reaches the
server again. Give ``confirm`` MCP tools to servers whose writes are idempotent, or
that can take the key from the arguments.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool

from parley.loading import read_config_file
from parley.settings import Settings
from parley.tools import ParleyTool, confirm

#: How long the worker waits, at start, for the servers to list their tools.
LOAD_SECONDS = 60.0


def read_connections(path: str) -> dict[str, dict[str, Any]]:
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
    return connections


def load_mcp_tools(connections: dict[str, dict[str, Any]]) -> list[BaseTool]:
    """Every tool of every server, listed once at start. Listing is async and a worker
    may load its tools inside or outside an event loop, so it runs on a thread of its
    own; each later call opens its own session from the same connection."""
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient(connections)  # type: ignore[arg-type]
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(asyncio.run, client.get_tools()).result(timeout=LOAD_SECONDS)
        except Exception as err:
            raise ValueError(
                f"PARLEY_MCP_SERVERS: could not list the tools of {', '.join(connections)}: "
                f"{_reason(err)}"
            ) from None


def _reason(err: BaseException) -> str:
    """The innermost cause (task groups wrap connection errors in exception groups)."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"


def toolset(settings: Settings | None = None) -> list[ParleyTool]:
    settings = settings or Settings.from_env()
    if not settings.mcp_servers:
        raise ValueError(
            "PARLEY_MCP_SERVERS is not set: name a JSON file of MCP server connections"
        )
    return [confirm(tool) for tool in load_mcp_tools(read_connections(settings.mcp_servers))]
