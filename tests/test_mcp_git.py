"""MCP tools behave like tools, against a published server: the real ``mcp-server-git``
from PyPI over stdio, pointed at real git repositories in a temporary directory, its
tools loaded by the real toolset and run by a real worker on the real dev server; only
the model is scripted, and it records what it was shown.

- an ``isError`` result reaches the model as a tool error (``ToolInputError``), and
  text content as text;
- a server that fails to start at call time is retried, and the call runs once; one
  that never starts fails the turn with its cause, not ``ExceptionGroup``;
- two servers with the same tool names are refused, naming both, and load side by side
  with ``"tool_name_prefix": true``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from pydantic import Field
from temporalio.api.enums.v1 import EventType

from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel
from parley.activities.tool_calls import tool_failure
from parley.activities.toolsets.mcp import toolset as mcp_toolset
from parley.contracts import Decision, PolicyRule
from parley.contracts.errors import ErrorType, TransientError
from parley.tools import ToolRegistry
from parley.tools.loading import McpConfig
from tests.support import call
from tests.support.cli import NOWHERE, assert_one_line_error, parley
from tests.support.processes import ROOT
from tests.support.transcripts import new_session, tool_messages

FLAKY_START = ROOT / "tests" / "support" / "mcp_flaky_start.py"
AUTO_READS = [PolicyRule(name="reads", tool="*git_[sl]*", decide="auto")]  # status, show, log


class RecordingScript(ScriptFileChatModel):
    """A scripted model that keeps the messages of each call: what the model was shown."""

    shown: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.shown.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kw)


def recording(*entries: dict[str, Any]) -> RecordingScript:
    return RecordingScript(entries=[ScriptEntry.model_validate(e) for e in entries])


def shown_tool_messages(model: RecordingScript) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in model.shown[-1] if isinstance(m, ToolMessage)}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def new_repo(path: Path, message: str) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text(f"{message}\n")
    git(path, "add", "README")
    git(path, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", message)
    return path


def git_server(repo: Path, **options: Any) -> dict[str, Any]:
    """A stdio connection to the published server (the console script's module)."""
    args = ["-m", "mcp_server_git", "--repository", str(repo)]
    return {"transport": "stdio", "command": sys.executable, "args": args, **options}


def servers_file(home: Path, servers: dict[str, Any]) -> str:
    file = home / "servers.json"
    file.write_text(json.dumps(servers))
    return str(file)


def registry(servers: str) -> ToolRegistry:
    return ToolRegistry(mcp_toolset(McpConfig(servers)), rules=AUTO_READS)


async def test_an_error_result_is_a_tool_error_and_text_is_text(
    parley_worker, tmp_path: Path
) -> None:
    repo = new_repo(tmp_path / "repo", "first commit")
    tools = registry(servers_file(tmp_path, {"git": git_server(repo)}))
    model = recording(
        {
            "content": "",
            "tool_calls": [
                call("git_status", "s1", repo_path=str(repo)),
                call("git_show", "s2", repo_path=str(repo), revision="no-such-revision"),
            ],
        },
        {"content": "That revision does not exist."},
    )
    async with parley_worker(tools, model) as conversations:
        done = await conversations.send(new_session(), "alice", "show me no-such-revision")
    assert done.status == "completed", done

    shown = shown_tool_messages(model)
    status, show = shown["s1"], shown["s2"]
    # Text content is the server's text, not JSON-encoded content blocks.
    assert isinstance(status.content, str) and status.content.startswith("Repository status:\n")
    assert "nothing to commit" in status.content
    assert status.artifact["status"] == "success"
    # The server's isError result (verified: git_show of an unknown revision) is a tool
    # error the model reads, with the server's own words.
    assert show.status == "error"
    assert show.artifact["status"] == "error"
    assert show.artifact["error"]["type"] == ErrorType.TOOL_INPUT
    assert "no-such-revision" in show.artifact["error"]["message"]
    assert show.content.startswith("Error: ") and "no-such-revision" in show.content


async def test_a_server_that_fails_to_start_once_is_retried_and_the_call_runs_once(
    parley_worker, client, tmp_path: Path
) -> None:
    repo = new_repo(tmp_path / "repo", "first commit")
    marker, starts = tmp_path / "fail-next-start", tmp_path / "starts.log"
    flaky = {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(FLAKY_START), str(marker), str(starts), "--repository", str(repo)],
    }
    tools = registry(servers_file(tmp_path, {"git": flaky}))
    assert starts.read_text().split() == ["started"]  # listed at load
    model = recording(
        {
            "content": "",
            "tool_calls": [
                call("git_create_branch", "b1", repo_path=str(repo), branch_name="feature-x")
            ],
        },
        {"content": "Branch created."},
    )
    async with parley_worker(tools, model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "create branch feature-x")
        assert [p.tool_call_id for p in turn.pending] == ["b1"]
        marker.touch()  # the server's next start fails
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="b1", action="approve")]
        )
        assert done.status == "completed" and done.reply == "Branch created.", done
        answers = tool_messages((await conversations.state(sid, "alice")).transcript)

    # Each call starts its own server: one start failed and one more served the call, so
    # the call reached a server once; Temporal ran one activity, on its second attempt.
    assert starts.read_text().split() == ["started", "failed", "started"]
    assert answers["b1"].artifact["status"] == "success", answers["b1"].artifact
    assert "feature-x" in answers["b1"].content
    assert git(repo, "branch", "--list", "feature-x").strip() == "feature-x"
    history = await client.get_workflow_handle(f"conversation-{sid}").fetch_history()
    started = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    runs = [s for s in started if scheduled[s.scheduled_event_id] == "parley.run_tool"]
    assert [r.attempt for r in runs] == [2]
    assert "TaskGroup" not in runs[0].last_failure.message
    assert "could not be reached" in runs[0].last_failure.message


async def test_a_server_that_never_starts_fails_the_turn_with_its_cause(
    parley_worker, tmp_path: Path
) -> None:
    repo = new_repo(tmp_path / "repo", "first commit")
    tools = registry(servers_file(tmp_path, {"git": git_server(repo)}))
    status = tools.get("git_status")
    assert status is not None
    subprocess.run(["rm", "-rf", str(repo)], check=True)  # the server now exits at start

    # The activity's view: a retryable transient error naming the server and the cause.
    with pytest.raises(TransientError) as raised:
        await status.tool.ainvoke({"repo_path": str(repo)})
    failure = tool_failure(raised.value)
    assert failure.type == ErrorType.TOOL_TRANSIENT and not failure.non_retryable
    assert failure.message == "MCP server 'git' could not be reached: McpError: Connection closed"

    # The turn's view, once Temporal's bounded retries are spent (about 15 s).
    model = recording({"content": "", "tool_calls": [call("git_status", "g1", repo_path="x")]})
    async with parley_worker(tools, model) as conversations:
        done = await conversations.send(new_session(), "alice", "status?")
    assert done.status == "failed", done
    assert "MCP server 'git' could not be reached: McpError: Connection closed" in done.error
    assert "TaskGroup" not in done.error and "ExceptionGroup" not in done.error


async def test_two_servers_with_one_tool_name_load_side_by_side_with_a_prefix(
    parley_worker, tmp_path: Path
) -> None:
    work = new_repo(tmp_path / "work", "work: first commit")
    home = new_repo(tmp_path / "home", "home: first commit")
    both = {"work": git_server(work), "home": git_server(home)}
    with pytest.raises(ValueError) as refused:
        registry(servers_file(tmp_path, both))
    assert str(refused.value) == (
        "PARLEY_MCP_SERVERS: servers 'work' and 'home' both have a tool named 'git_status': "
        "set \"tool_name_prefix\": true on 'work' (its tools are then named work_<tool>)"
    )

    both["home"] = git_server(home, tool_name_prefix=True)
    tools = registry(servers_file(tmp_path, both))
    names = set(tools.names())
    assert {"git_log", "home_git_log", "git_status", "home_git_status"} <= names
    assert len(names) == 2 * len([n for n in names if not n.startswith("home_")])
    model = recording(
        {
            "content": "",
            "tool_calls": [
                call("git_log", "l1", repo_path=str(work)),
                call("home_git_log", "l2", repo_path=str(home)),
                call("home_git_log", "l3", repo_path=str(work)),
            ],
        },
        {"content": "Both logged."},
    )
    async with parley_worker(tools, model) as conversations:
        done = await conversations.send(new_session(), "alice", "log both")
    assert done.status == "completed", done
    shown = shown_tool_messages(model)
    # Each name reaches its own server: a server refuses a repository it was not given.
    assert "work: first commit" in shown["l1"].content
    assert "home: first commit" in shown["l2"].content
    assert shown["l3"].artifact["error"]["type"] == ErrorType.TOOL_INPUT
    assert "outside the allowed repository" in shown["l3"].content


def test_a_worker_refuses_a_tool_name_collision_in_one_line_naming_both(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", "first commit")
    servers = servers_file(tmp_path, {"one": git_server(repo), "two": git_server(repo)})
    env = {
        **NOWHERE,
        "PARLEY_TOOLS": "parley.activities.toolsets.mcp:toolset",
        "PARLEY_MCP_SERVERS": servers,
        "PARLEY_MODEL": "scripted",
    }
    assert_one_line_error(
        parley(env, "worker"),
        "servers 'one' and 'two' both have a tool named 'git_status': "
        "set \"tool_name_prefix\": true on 'one'",
    )


def test_the_prefix_option_is_true_or_false(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    servers = servers_file(tmp_path, {"git": git_server(repo, tool_name_prefix="yes")})
    with pytest.raises(ValueError, match="server 'git': \"tool_name_prefix\" must be true or"):
        registry(servers)
