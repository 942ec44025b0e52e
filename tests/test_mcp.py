"""Tools from MCP servers behind the same gate: a real MCP server (FastMCP, streamable
HTTP on 127.0.0.1, in its own process), a real worker loading its tools with
``langchain-mcp-adapters``, the real dev server. A write waits for approval and runs
once approved; a policy rule makes the read ``auto``; an MCP error goes back to the
model as a tool error (``ToolInputError``) and text as text. A server gone at call time
is retried with its cause, not an exception group. The published ``mcp-server-git`` is
tested in ``tests/test_mcp_git.py``."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED, INVALID_PARAMS, ErrorData

from parley.activities.tool_calls import tool_failure
from parley.activities.toolsets.mcp import mcp_failure
from parley.activities.toolsets.mcp import toolset as mcp_toolset
from parley.contracts import Decision, PolicyRule
from parley.contracts.errors import ErrorType, TransientError
from parley.tools import ToolRegistry
from parley.tools.loading import McpConfig
from tests.support import call, script
from tests.support.ports import free_port
from tests.support.processes import ROOT, process
from tests.support.transcripts import new_session, tool_messages


@contextmanager
def notes_server(home: Path) -> Iterator[tuple[str, Path]]:
    """The notes server running: its servers file and its notes file."""
    notes = home / "notes.txt"
    port = free_port()
    env = {**os.environ, "NOTES_FILE": str(notes), "PYTHONPATH": str(ROOT)}
    with process(
        [sys.executable, str(ROOT / "tests" / "support" / "mcp_notes_server.py"), str(port)],
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


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with notes_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


def registry(servers: str) -> ToolRegistry:
    tools = mcp_toolset(McpConfig(servers))
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
        mcp_toolset(McpConfig(str(bad)))
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
        mcp_toolset(McpConfig(str(bad)))
    with pytest.raises(ValueError, match="PARLEY_MCP_SERVERS is not set"):
        mcp_toolset(McpConfig())


async def test_a_server_gone_at_call_time_is_retried_with_its_cause(tmp_path: Path) -> None:
    with notes_server(tmp_path) as (servers, _):
        tools = registry(servers)
    list_notes = tools.get("list_notes")
    assert list_notes is not None
    with pytest.raises(TransientError) as raised:
        await list_notes.tool.ainvoke({})
    failure = tool_failure(raised.value)
    assert failure.type == ErrorType.TOOL_TRANSIENT and not failure.non_retryable
    assert failure.message == (
        "MCP server 'notes' could not be reached: ConnectError: All connection attempts failed"
    )


def test_what_a_server_answers_is_mapped_onto_the_error_table() -> None:
    """The answers no test server gives on demand, as the SDK and httpx raise them."""
    request = httpx.Request("POST", "http://127.0.0.1/mcp")

    def status(code: int, **headers: str) -> httpx.HTTPStatusError:
        response = httpx.Response(code, headers=headers, request=request)
        return httpx.HTTPStatusError("status", request=request, response=response)

    def mapped(err: BaseException) -> tuple[str, str, bool]:
        failure = tool_failure(mcp_failure("s", ExceptionGroup("tg", [err])))
        return failure.type, failure.message, failure.non_retryable

    invalid = McpError(ErrorData(code=INVALID_PARAMS, message="missing text"))
    assert mapped(invalid) == (
        ErrorType.TOOL_INPUT,
        "MCP server 's' refused the call: missing text",
        True,
    )
    closed = McpError(ErrorData(code=CONNECTION_CLOSED, message="Connection closed"))
    assert mapped(closed)[0] == ErrorType.TOOL_TRANSIENT
    unavailable = tool_failure(mcp_failure("s", status(503, **{"Retry-After": "2"})))
    assert unavailable.type == ErrorType.TOOL_TRANSIENT
    assert unavailable.next_retry_delay is not None
    assert unavailable.next_retry_delay.total_seconds() == 2
    assert mapped(status(403)) == (
        ErrorType.TOOL_PERMISSION,
        "MCP server 's' answered HTTP 403",
        True,
    )
    assert mapped(status(404)) == (
        ErrorType.TOOL_FAILED,
        "McpServerError: MCP server 's' answered HTTP 404",
        True,
    )
