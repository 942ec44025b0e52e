"""Tools from MCP servers behind the same gate (issue 11): a real MCP server (FastMCP,
streamable HTTP on 127.0.0.1, in its own process), a real worker loading its tools with
``langchain-mcp-adapters``, the real dev server. A write waits for approval and runs
once approved; a policy rule makes the read ``auto``; an MCP error goes back to the
model as a tool error."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from parley.activities.toolsets.mcp import toolset as mcp_toolset

from parley.contracts import Decision, PolicyRule
from parley.errors import ErrorType
from parley.settings import Settings
from parley.tools import ToolRegistry
from tests.checks import new_session, tool_messages
from tests.support import call, script
from tests.test_topology import free_port, process

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    home = tmp_path_factory.mktemp("mcp")
    notes = home / "notes.txt"
    port = free_port()
    env = {**os.environ, "NOTES_FILE": str(notes), "PYTHONPATH": str(ROOT)}
    with process(
        [sys.executable, str(ROOT / "tests" / "mcp_notes_server.py"), str(port)],
        env,
        home / "server.log",
    ):
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (home / "server.log").read_text()
                time.sleep(0.2)
        servers = home / "servers.json"
        servers.write_text(json.dumps({"notes": {"transport": "streamable_http", "url": url}}))
        yield str(servers), notes


def registry(servers: str) -> ToolRegistry:
    tools = mcp_toolset(Settings(mcp_servers=servers))
    rules = [
        PolicyRule(name="reads", tool="list_notes", decide="auto"),
        PolicyRule(name="probes", tool="fail", decide="auto"),
    ]
    return ToolRegistry(tools, rules=rules)


async def test_an_mcp_tool_waits_for_approval_and_runs_once_approved(
    parley_worker, mcp_server: tuple[str, Path]
) -> None:
    servers, notes = mcp_server
    tools = registry(servers)
    assert {t.name for t in tools.tools()} == {"add_note", "list_notes", "fail"}
    assert {t.name: t.policy for t in tools.tools()}["add_note"] == "confirm"
    model = script(
        {"content": "", "tool_calls": [call("add_note", "n1", text="buy milk")]},
        {"content": "", "tool_calls": [call("list_notes", "n2"), call("fail", "n3", reason="no")]},
        {"content": "Noted, and listed."},
    )
    async with parley_worker(tools, model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "note: buy milk")
        assert [p.tool_call_id for p in turn.pending] == ["n1"]
        assert not notes.exists()  # nothing written before the decision

        approve = [Decision(tool_call_id="n1", action="approve")]
        done = await conversations.decide(sid, "alice", approve)
        assert done.status == "completed" and done.reply == "Noted, and listed."
        assert notes.read_text() == "buy milk\n"  # written once
        answers = tool_messages((await conversations.state(sid, "alice")).transcript)
        assert "noted: buy milk" in str(answers["n1"].content)
        assert "buy milk" in str(answers["n2"].content)  # auto by rule `reads`
        # An MCP error result is a tool error the model can read, not a success.
        assert answers["n3"].status == "error" and "no" in str(answers["n3"].content)
        assert answers["n3"].artifact["status"] == "error"
        assert answers["n3"].artifact["error"]["type"] == ErrorType.TOOL_INPUT
        # Text content is text, not JSON-encoded content blocks.
        assert answers["n1"].content == "noted: buy milk"
        assert answers["n2"].content == "buy milk\n"


def test_unreachable_or_malformed_servers_are_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "servers.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must map server names"):
        mcp_toolset(Settings(mcp_servers=str(bad)))
    bad.write_text(
        json.dumps(
            {
                "gone": {
                    "transport": "streamable_http",
                    "url": f"http://127.0.0.1:{free_port()}/mcp",
                }
            }
        )
    )
    with pytest.raises(ValueError, match="could not list the tools of gone"):
        mcp_toolset(Settings(mcp_servers=str(bad)))
    with pytest.raises(ValueError, match="PARLEY_MCP_SERVERS is not set"):
        mcp_toolset(Settings())
