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


def children_of(pid: int) -> dict[int, str]:
    """Live child processes of ``pid`` (pid → command name), from /proc."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ")"
        comm, rest = text[text.index("(") + 1 :].rsplit(")", 1)
        state, ppid = rest.split()[:2]
        if int(ppid) == pid and state != "Z":
            found[int(stat.parent.name)] = comm
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


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
        children = children_of(process.pid)
        process.terminate()  # SIGTERM, as a service manager stops it
        process.wait(timeout=30)
    # The Temporal dev server it started is stopped with it, not left running.
    assert "temporal" in children.values(), children
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if alive(pid)], f"left running: {children}"


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


def without_paths(dev_server: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in dev_server.items() if k not in ("data_dir", "ui")}


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 1, result
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("option", ["--port", "--ui-port"])
def test_dev_refuses_a_port_something_else_listens_on(tmp_path: Path, option: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": str(free_port()), "--ui-port": str(free_port())}
        ports[option] = str(port)
        flags = [x for pair in ports.items() for x in pair]
        result = subprocess.run(
            [*PARLEY, "dev", "--data-dir", str(tmp_path), *flags, "--plans-port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert_one_line_error(result, f"port {port} ({option}) on 127.0.0.1 is not free")
    assert "--port/--ui-port" in result.stderr
    assert "Parley dev is running" not in result.stdout


def test_dev_names_a_bad_data_dir(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    result = parley(dict(os.environ), "dev", "--data-dir", str(not_a_dir / "sub"))
    assert_one_line_error(result, f"cannot use {not_a_dir / 'sub'} as the data directory")


def test_plans_key_file_is_created_private(tmp_path: Path) -> None:
    from parley.dev import _plans_api_key

    key = _plans_api_key(tmp_path)
    assert len(key) > 20 and (tmp_path / "plans-api-key").stat().st_mode & 0o777 == 0o600
    assert _plans_api_key(tmp_path) == key  # kept, not remade


def test_bad_ids_and_configuration_are_reported_before_connecting() -> None:
    nowhere = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    for args, expected in [
        (["show", "--session", "a b", "--user", "bob"], "session id 'a b' is not valid"),
        (["end", "--session", "ok", "--user", "default"], "'default' is not a user id"),
        (["approve", "--session", "a/b", "--user", "bob"], "session id 'a/b' is not valid"),
    ]:
        assert_one_line_error(parley(nowhere, *args), expected)
    for name, value, expected in [
        ("PARLEY_TOOLS", "os:sep", "toolset 'os:sep' is a str, not a toolset"),
        ("PARLEY_MODEL", "json:loads", "json:loads is not a zero-argument callable"),
        ("PARLEY_MAX_MODEL_CALLS_PER_TURN", "0.5", "must be a whole number of at least 1"),
    ]:
        env = {**nowhere, "PARLEY_GIT_PROJECTS": "/nonexistent.json", name: value}
        if name == "PARLEY_MODEL":
            env["PARLEY_TOOLS"] = ""
        assert_one_line_error(parley(env, "worker"), expected)


def test_ending_twice_and_sending_after_the_end_are_one_line_refusals(dev_server) -> None:
    env = without_paths(dev_server)
    who = ["--session", "cli-ended", "--user", "dana"]
    assert parley(env, "send", *who, "list my plans").returncode == 0
    ended = parley(env, "end", *who)
    assert ended.returncode == 0 and "is ending" in ended.stdout, ended.stderr
    deadline = time.monotonic() + 30
    while json.loads(parley(env, "show", *who, "--json").stdout)["status"] != "ended":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert_one_line_error(parley(env, "end", *who), "conversation cli-ended has ended")
    # the SDK's start future must be read too: no "Future exception was never retrieved"
    assert_one_line_error(parley(env, "send", *who, "hello?"), "has ended; use a new session")


def test_show_prints_no_warnings(dev_server) -> None:
    env = without_paths(dev_server)
    who = ["--session", "cli-show", "--user", "erin"]
    assert parley(env, "send", *who, "list the repositories of project demo").returncode == 0
    shown = parley(env, "show", *who)
    assert shown.returncode == 0 and shown.stderr == ""
    assert "git_list_project_repositories" in shown.stdout


def test_decision_commands_offer_only_their_options() -> None:
    for command, present, absent in [
        ("approve", [], ["--args", "--message"]),
        ("reject", ["--message"], ["--args"]),
        ("respond", ["--message"], ["--args"]),
        ("edit", ["--args"], ["--message"]),
    ]:
        shown = parley({**os.environ, "COLUMNS": "200"}, command, "--help").stdout
        for option in present:
            assert option in shown, (command, option)
        for option in absent:
            assert option not in shown, (command, option)


@pytest.fixture
def two_call_worker(dev_server, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A second worker on its own task queue whose model proposes two calls at once."""
    projects = Path(dev_server["data_dir"]) / "projects.json"
    calls = [
        {
            "name": "git_prepare_worktree",
            "args": {
                "project": "demo",
                "repo_alias": alias,
                "branch_kind": "feat",
                "branch_slug": f"two-{alias}",
            },
            "id": f"call-{alias}",
        }
        for alias in ("web", "api")
    ]
    script = tmp_path / "two-calls.json"
    script.write_text(json.dumps([{"content": "", "tool_calls": calls}, {"content": "both done"}]))
    env = {
        **without_paths(dev_server),
        "PARLEY_TASK_QUEUE": "parley-dev-two-calls",
        "PARLEY_MODEL": f"script:{script}",
        "PARLEY_TOOLS": "parley.toolsets.git:toolset",
        "PARLEY_GIT_PROJECTS": str(projects),
    }
    process = subprocess.Popen(
        [*PARLEY, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield env
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_decisions_with_several_pending_calls_are_clear(two_call_worker) -> None:
    env = two_call_worker
    who = ["--session", "cli-two", "--user", "fay"]
    proposed = json.loads(parley(env, "send", *who, "--json", "branch both").stdout)
    assert [p["tool_call_id"] for p in proposed["pending"]] == ["call-web", "call-api"]

    edit = parley(env, "edit", *who, "--args", "{}")
    assert_one_line_error(edit, "edit needs one CALL_ID when 2 calls are pending")
    one = parley(env, "approve", *who, "call-web")
    assert_one_line_error(one, "missing a decision for")

    both = json.loads(parley(env, "approve", *who, "--json").stdout)
    assert [r["status"] for r in both["results"]] == ["success", "success"]
    assert both["reply"] == "both done"
