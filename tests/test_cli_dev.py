"""`parley dev` as a user runs it: a subprocess with the embedded dev server, UI and the
offline model; then a scripted conversation through `parley send` / `parley approve`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

# The console script the README's quick start runs (installed next to this Python).
PARLEY = [str(Path(sys.executable).parent / "parley")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    data_dir = tmp_path_factory.mktemp("parley-dev")
    port, ui_port, plans_port = free_port(), free_port(), free_port()
    env = {**os.environ, "PARLEY_TASK_QUEUE": "parley-dev-test"}
    for name in ("PARLEY_GIT_PROJECTS", "PARLEY_TOOLS", "PARLEY_PLANS_URL", "PARLEY_MODEL"):
        env.pop(name, None)
    process = subprocess.Popen(
        [
            *PARLEY,
            "dev",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--plans-port",
            str(plans_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    for line in process.stdout:  # blocks on the child's output, not a sleep loop
        lines.append(line)
        if "Parley dev is running" in line or time.monotonic() > deadline:
            break
    assert any("Parley dev is running" in line for line in lines), "".join(lines)
    client_env = {**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    try:
        yield {"data_dir": str(data_dir), "ui": f"http://127.0.0.1:{ui_port}", **client_env}
    finally:
        process.terminate()
        process.wait(timeout=30)


def parley(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PARLEY, *args], capture_output=True, text=True, env=env, timeout=120)


def test_dev_runs_a_scripted_conversation_with_send_and_approve(dev_server) -> None:
    env = {k: v for k, v in dev_server.items() if k not in ("data_dir", "ui")}
    who = ["--session", "cli-demo", "--user", "alice", "--json"]

    listed = parley(env, "send", *who, "list the repositories of project demo")
    assert listed.returncode == 0, listed.stderr
    turn = json.loads(listed.stdout)
    assert turn["status"] == "completed"
    assert turn["results"][0]["name"] == "git_list_project_repositories"
    assert [r["alias"] for r in turn["results"][0]["payload"]["repositories"]] == ["web", "api"]

    proposed = json.loads(
        parley(env, "send", *who, "prepare a feat branch demo-change in web").stdout
    )
    assert proposed["status"] == "awaiting_approval"
    (pending,) = proposed["pending"]
    assert set(pending) == {"tool_call_id", "name", "args", "description", "expires_at"}
    assert pending["name"] == "git_prepare_worktree"

    refused = parley(env, "send", *who, "yes, I confirm")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "wait for your decision" in refused.stderr

    approved = json.loads(parley(env, "approve", *who).stdout)
    assert approved["status"] == "completed"
    assert approved["results"][0]["status"] == "success"
    worktree = Path(approved["results"][0]["payload"]["worktree"])
    assert worktree.is_dir() and worktree.is_relative_to(dev_server["data_dir"])

    shown = json.loads(parley(env, "show", *who).stdout)
    assert shown["status"] == "idle" and shown["pending"] == []

    other = parley(env, "show", "--session", "cli-demo", "--user", "mallory")
    assert other.returncode == 1 and "another user" in other.stderr and "alice" not in other.stderr

    assert (Path(dev_server["data_dir"]) / "temporal.db").exists()
    with urllib.request.urlopen(dev_server["ui"], timeout=10) as response:
        assert response.status == 200


def test_dev_serves_the_plans_toolset(dev_server) -> None:
    env = {k: v for k, v in dev_server.items() if k not in ("data_dir", "ui")}
    who = ["--session", "cli-plans", "--user", "bob", "--json"]
    proposed = json.loads(
        parley(env, "send", *who, "please create a plan called Q3 review for next week").stdout
    )
    assert proposed["pending"][0]["name"] == "create_plan"
    approved = json.loads(parley(env, "approve", *who).stdout)
    plan = approved["results"][0]["payload"]
    assert approved["results"][0]["status"] == "success"
    assert plan["title"] == "Q3 review" and plan["user_id"] == "bob"
    listed = json.loads(parley(env, "send", *who, "list my plans").stdout)
    assert listed["results"][0]["payload"]["count"] == 1


def test_cli_refuses_bad_input_with_one_line(dev_server) -> None:
    env = {k: v for k, v in dev_server.items() if k not in ("data_dir", "ui")}
    for args, expected in [
        (["send", "--session", "x", "--user", "default", "hi"], "'default' is not a user id"),
        (["send", "--session", "bad id!", "--user", "bob", "hi"], "session id"),
        (["edit", "--session", "x", "--user", "bob", "--args", "{oops"], "--args is not JSON"),
        (["approve", "--session", "nobody-here", "--user", "bob"], "no conversation"),
    ]:
        result = parley(env, *args)
        assert result.returncode == 1, result
        assert expected in result.stderr
        assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_chat_answers_approval_prompts(dev_server) -> None:
    env = {k: v for k, v in dev_server.items() if k not in ("data_dir", "ui")}
    typed = "\n".join(
        [
            "prepare a fix branch chat-change in api",
            "maybe",  # not an answer: asked again
            "edit",
            "{not json",  # refused, asked again
            '{"project": "demo", "repo_alias": "api", "branch_kind": "fix",'
            ' "branch_slug": "chat-edited"}',
            "/show",
            "/quit",
        ]
    )
    result = subprocess.run(
        [*PARLEY, "chat", "--session", "cli-chat", "--user", "carol"],
        input=typed + "\n",
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "git_prepare_worktree" in result.stdout
    assert "Please answer approve, edit, reject or respond" in result.stdout
    assert "not JSON" in result.stdout
    assert (
        "fix/chat-edited" in result.stdout and "A reviewer changed the arguments" in result.stdout
    )
    assert "status idle" in result.stdout
