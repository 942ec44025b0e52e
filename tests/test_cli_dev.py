"""End to end: `parley dev` as a user runs it: a subprocess with the embedded dev
server, UI and the offline model; then scripted conversations through `parley send` /
`parley approve`, `parley tools` beside it, and what it logs. What the commands print on
a terminal (`chat`, `show`, `respond`) is test_cli_terminal; the dev server is
tests.support.dev."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.cli import assert_one_line_error, parley
from tests.support.dev import DEV_OUTPUTS, parley_all, without_paths
from tests.support.ports import free_port
from tests.support.processes import PARLEY


def test_dev_runs_a_scripted_conversation_with_send_and_approve(dev_server) -> None:
    env = without_paths(dev_server)
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
    assert {"tool_call_id", "name", "args", "description", "expires_at"} <= set(pending)
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
    env = without_paths(dev_server)
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
    env = without_paths(dev_server)
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


def test_tools_works_beside_dev_with_no_variables_set(dev_server) -> None:
    """`parley tools` in a second shell shows the tools of `parley dev`'s worker, as the
    other commands talk to it: with only the address."""
    env = without_paths(dev_server)
    for name in ("PARLEY_TOOLS", "PARLEY_GIT_PROJECTS", "PARLEY_PLANS_URL", "PARLEY_POLICIES"):
        assert name not in env
    env.pop("PARLEY_PLANS_API_KEY", None)
    cases = [
        (env, ["tools"]),
        (env, ["tools", "--json"]),
        ({**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}, ["tools"]),
        ({**env, "PARLEY_TASK_QUEUE": "not-the-dev-queue"}, ["tools"]),
        ({**env, "PARLEY_TOOLS": "parley.activities.toolsets.git:toolset"}, ["tools", "--json"]),
    ]
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        results = list(pool.map(lambda case: parley(case[0], *case[1]), cases))
    text, as_json, elsewhere, other_queue, own_tools = results
    assert text.returncode == 0, text.stderr
    assert f"the worker of the parley dev at {env['TEMPORAL_ADDRESS']}" in text.stdout
    assert "git_prepare_worktree  confirm  (preview, inverse)" in text.stdout.splitlines()
    assert "create_plan" in text.stdout
    shown = {tool["name"]: tool for tool in json.loads(as_json.stdout)["tools"]}
    assert {"git_push_branch", "create_plan", "list_plans"} <= set(shown)
    assert shown["git_push_branch"]["has_inverse"] and shown["git_push_branch"]["has_preview"]
    assert not shown["list_plans"]["has_inverse"]
    # Not the dev's address or task queue: the environment alone, as before.
    assert_one_line_error(elsewhere, "PARLEY_GIT_PROJECTS is not set")
    assert_one_line_error(other_queue, "PARLEY_GIT_PROJECTS is not set")
    # What the environment sets wins over the dev's.
    own = {tool["name"] for tool in json.loads(own_tools.stdout)["tools"]}
    assert "git_push_branch" in own and "create_plan" not in own


def test_dev_runs_the_gateway_and_prints_a_token_for_its_page(dev_server) -> None:
    """`parley dev` starts the gateway; the banner's page link carries a token that signs
    in as the dev user, and the conversation made with the CLI is on the page's API."""
    match = re.search(r"approval page (http://\S+)/#token=(\S+)", dev_server["banner"])
    assert match, dev_server["banner"]
    base, token = match.groups()
    assert base == dev_server["gateway"]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{base}/v1/me", headers=headers).json()["user_id"] == "alice"
    assert "Parley" in httpx.get(f"{base}/").text
    sent = httpx.post(
        f"{base}/v1/conversations/dev-gateway/messages",
        json={"text": "hello"},
        headers=headers,
        timeout=60,
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["status"] == "completed"
    state = httpx.get(f"{base}/v1/conversations/dev-gateway", headers=headers).json()
    assert state["temporal_ui_url"].startswith(dev_server["ui"])
    assert httpx.get(f"{base}/v1/me").status_code == 401


def test_plans_key_file_is_created_private(tmp_path: Path) -> None:
    from parley.cli.dev import _plans_api_key

    key = _plans_api_key(tmp_path)
    assert len(key) > 20 and (tmp_path / "plans-api-key").stat().st_mode & 0o777 == 0o600
    assert _plans_api_key(tmp_path) == key  # kept, not remade


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
        "PARLEY_TOOLS": "parley.activities.toolsets.git:toolset",
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
    one = json.loads(parley(env, "approve", *who, "call-web", "--json").stdout)
    assert [r["tool_call_id"] for r in one["results"]] == ["call-web"]
    assert [p["tool_call_id"] for p in one["pending"]] == ["call-api"]  # it keeps waiting

    rest = json.loads(parley(env, "approve", *who, "--json").stdout)
    assert [r["tool_call_id"] for r in rest["results"]] == ["call-api"]
    assert rest["reply"] == "both done"


# --- list, send -------------------------------------------------------------------------


def test_list_shows_conversations_awaiting_approval_first(dev_server) -> None:
    env = without_paths(dev_server)

    def ivy(session: str, *args: str) -> list[str]:
        return ["--session", session, "--user", "ivy", *args]

    for result in parley_all(
        env,
        ["send", *ivy("cli-list-waiting", "prepare a feat branch list-me in web")],
        ["send", *ivy("cli-list-ended", "list my plans")],
        ["send", "--session", "cli-list-jon", "--user", "jon", "list my plans"],  # not ivy's
    ):
        assert result.returncode == 0, result.stderr
    ended = parley(env, "end", *ivy("cli-list-ended", "--force"))
    assert ended.returncode == 0, ended.stderr
    idle = parley(env, "send", *ivy("cli-list-idle", "list my plans"))
    assert idle.returncode == 0, idle.stderr

    expected = [  # awaiting approval first, then the most recent first
        ("cli-list-waiting", "awaiting_approval", ["git_prepare_worktree"]),
        ("cli-list-idle", "idle", []),
        ("cli-list-ended", "ended", []),
    ]
    deadline = time.monotonic() + 20  # visibility is eventually consistent
    while True:
        listed = parley(env, "list", "--user", "ivy", "--json")
        assert listed.returncode == 0, listed.stderr
        found = json.loads(listed.stdout)
        got = [(c["session_id"], c["status"], c["pending_tools"]) for c in found]
        if got == expected or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got == expected
    assert found[-1]["execution_status"] == "terminated"
    assert all(c["started_at"] <= c["last_activity_at"] for c in found)

    table = parley({**env, "COLUMNS": "40"}, "list", "--user", "ivy")
    assert table.returncode == 0 and table.stderr == ""
    lines = table.stdout.splitlines()
    assert "SESSION" in lines[0] and "LAST ACTIVITY" in lines[0]
    assert lines[1].split()[:3] == ["cli-list-waiting", "awaiting_approval", "git_prepare_worktree"]
    assert [line.split()[0] for line in lines[1:]] == [c[0] for c in expected]


def test_send_reads_a_large_message_from_stdin_or_a_file(dev_server, tmp_path: Path) -> None:
    env = without_paths(dev_server)
    piped = "piped: " + "a long message line\n" * 10_000  # 200 KB: too long for an argv
    from_file = "from a file: " + "ü" * 100_000 + "\n"  # 200 KB of UTF-8
    (tmp_path / "message.txt").write_text(from_file, encoding="utf-8")
    assert len(piped.encode()) > 200_000 and len(from_file.encode()) > 200_000

    def send(session: str, *args: str, stdin: str | None = None) -> None:
        result = subprocess.run(
            [*PARLEY, "send", "--session", session, "--user", "kim", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr

    with ThreadPoolExecutor(max_workers=3) as pool:
        for sent in [
            pool.submit(send, "cli-send-stdin", stdin=piped),  # no TEXT, input piped in
            pool.submit(send, "cli-send-file", "--file", str(tmp_path / "message.txt")),
            pool.submit(send, "cli-send-dash", "-", stdin="a dash\n"),
        ]:
            sent.result()

    shown = parley_all(
        env,
        *(
            ["show", "--session", session, "--user", "kim", "--json"]
            for session in ("cli-send-stdin", "cli-send-file", "cli-send-dash")
        ),
    )
    humans = [
        [m["content"] for m in json.loads(s.stdout)["transcript"] if m["type"] == "human"]
        for s in shown
    ]
    # As given, without the trailing newline a file or a pipe ends with.
    assert humans == [[piped.rstrip("\n")], [from_file.rstrip("\n")], ["a dash"]]


# --- workers and the dev server ---------------------------------------------------------


def test_worker_without_tools_warns_at_start(dev_server, tmp_path: Path) -> None:
    env = {**without_paths(dev_server), "PARLEY_TOOLS": "", "PARLEY_TASK_QUEUE": "no-tools"}
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        process = subprocess.Popen([*PARLEY, "worker"], env=env, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 30
        while "worker on task queue" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text()
    assert "warning: no tools: PARLEY_TOOLS='' loads none" in text
    assert text.index("warning: no tools") < text.index("worker on task queue")
    assert "Traceback" not in text


def test_a_second_dev_on_the_same_data_dir_is_refused(dev_server) -> None:
    result = subprocess.run(
        [
            *PARLEY,
            "dev",
            "--data-dir",
            dev_server["data_dir"],
            "--port",
            str(free_port()),
            "--ui-port",
            str(free_port()),
            "--plans-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=without_paths(dev_server),
    )
    assert_one_line_error(result, f"{dev_server['data_dir']} is in use by another `parley dev`")
    assert f"process {dev_server['pid']} holds" in result.stderr
    assert "Parley dev is running" not in result.stdout


def test_an_expected_tool_error_is_one_line_in_devs_log(dev_server) -> None:
    """Pushing a protected branch is refused with a ToolPermissionError the model reads:
    `parley dev`'s console says so in one line, with no traceback."""
    env = without_paths(dev_server)
    who = ["--session", "cli-protected", "--user", "kim"]
    output = DEV_OUTPUTS[dev_server["pid"]]
    before = len(output.text())
    proposed = parley(env, "send", *who, "push main in web")
    assert "git_push_branch" in proposed.stdout, proposed
    approved = parley(env, "approve", *who, "--json")
    (result,) = json.loads(approved.stdout)["results"]
    assert result["status"] == "error" and "is protected" in result["content"], result
    assert result["error"]["type"] == "ToolPermissionError"
    # What dev printed meanwhile: all of it is in the pipe once approve has answered.
    printed = output.text()[before:]
    assert "Traceback" not in printed, printed
    about_it = [line for line in printed.splitlines() if "conversation-cli-protected" in line]
    assert len(about_it) == 1, printed
    assert "ToolPermissionError" in about_it[0] and "is protected" in about_it[0]
    assert len([line for line in printed.splitlines() if line.strip()]) == 1, printed


def test_dev_hints_name_the_address_and_queue_when_not_the_defaults(dev_server) -> None:
    address = dev_server["TEMPORAL_ADDRESS"]
    exports = [line for line in dev_server["banner"].splitlines() if "export " in line]
    assert len(exports) == 1, dev_server["banner"]
    assert f"TEMPORAL_ADDRESS={address}" in exports[0]
    assert "PARLEY_TASK_QUEUE=parley-dev-test" in exports[0]
    assert f"PARLEY_PAYLOAD_STORE={dev_server['PARLEY_PAYLOAD_STORE']}" in exports[0]
