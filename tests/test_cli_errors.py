"""The console script's refusals that need no Temporal server (`python worker.py` and
`parley dev`'s included): one plain line on stderr (never a traceback, never user text
read as Rich markup or emoji codes) and exit code 1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.cli import NOWHERE, assert_one_line_error, parley, parley_all
from tests.support.ports import free_port
from tests.support.processes import PARLEY, ROOT


def test_worker_configuration_errors_are_one_plain_line(tmp_path: Path) -> None:
    (tmp_path / "broken_tools.py").write_text(
        "def toolset():\n    raise RuntimeError('no [bold]tools[/bold] today :factory:')\n"
    )
    base = {**NOWHERE, "PYTHONPATH": str(tmp_path), "PARLEY_TOOLS": ""}
    for name in ("PARLEY_MODEL", "PARLEY_GIT_PROJECTS"):
        base.pop(name, None)
    no_registry = {k: v for k, v in base.items() if k != "PARLEY_TOOLS"}  # the default: git
    cases = [
        # user text is printed as typed: no emoji for ":factory", no markup for "[bold]"
        ({**base, "PARLEY_MODEL": "no_such_mod:factory"}, "cannot load no_such_mod:factory"),
        ({**base, "PARLEY_TOOLS": "[bold]nope:x"}, "toolset '[bold]nope:x': cannot import [bold]"),
        (
            {**base, "PARLEY_TOOLS": "broken_tools:toolset"},
            "PARLEY_TOOLS='broken_tools:toolset': RuntimeError: no [bold]tools[/bold] today "
            ":factory:",
        ),
        (no_registry, "PARLEY_GIT_PROJECTS is not set"),
    ]
    results = parley_all(*((env, ["worker"]) for env, _ in cases))
    for (_, expected), result in zip(cases, results, strict=True):
        assert_one_line_error(result, expected)
        assert "🏭" not in result.stderr


def test_python_worker_py_reports_a_bad_configuration_as_parley_worker_does() -> None:
    """``python worker.py`` from a checkout is ``parley worker``: each bad configuration
    is the same one line, not a traceback."""
    base = {**NOWHERE, "PARLEY_TOOLS": ""}
    for name in ("PARLEY_MODEL", "PARLEY_GIT_PROJECTS"):
        base.pop(name, None)
    cases = [
        ({**base, "PARLEY_TOOLS": "os:sep"}, "toolset 'os:sep' is a str, not a toolset"),
        ({**base, "PARLEY_MODEL": "json:loads"}, "json:loads is not a zero-argument callable"),
        ({**base, "PARLEY_MAX_MODEL_CALLS_PER_TURN": "0.5"}, "must be a whole number"),
        ({**base, "PARLEY_LOG_FORMAT": "xml"}, "PARLEY_LOG_FORMAT"),
        ({k: v for k, v in base.items() if k != "PARLEY_TOOLS"}, "PARLEY_GIT_PROJECTS is not set"),
        (base, "cannot reach Temporal at 127.0.0.1:1"),  # a good one, with no server
    ]
    worker_py = [sys.executable, str(ROOT / "worker.py")]

    def run(env: dict[str, str], command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)

    with ThreadPoolExecutor(max_workers=4) as pool:
        from_checkout = list(pool.map(lambda case: run(case[0], worker_py), cases))
        installed = list(pool.map(lambda case: run(case[0], [*PARLEY, "worker"]), cases))
    for (_, expected), script, command in zip(cases, from_checkout, installed, strict=True):
        assert script.returncode == command.returncode == 1, (script, command)
        assert expected in script.stderr, script.stderr
        assert "Traceback" not in script.stderr, script.stderr
        assert script.stderr == command.stderr, (script.stderr, command.stderr)
        error_lines = [line for line in script.stderr.splitlines() if line.startswith("error: ")]
        assert len(error_lines) == 1 and script.stderr.splitlines()[-1] == error_lines[0]


def test_unreachable_temporal_is_one_line() -> None:
    show, chat, worker = parley_all(
        (NOWHERE, ["show", "--session", "s", "--user", "bob"]),
        (NOWHERE, ["chat", "--session", "s", "--user", "bob"]),
        ({**NOWHERE, "PARLEY_TOOLS": "", "PARLEY_MODEL": "scripted"}, ["worker"]),
    )
    expected = "cannot reach Temporal at 127.0.0.1:1 (Connection refused). Is `parley dev` running"
    for result in (show, chat):
        assert_one_line_error(result, expected)
        assert "tonic" not in result.stderr and "Transport" not in result.stderr
    # A worker with no tools says so first, then why it cannot start.
    assert worker.returncode == 1
    warning, error = worker.stderr.splitlines()
    assert warning.startswith("warning: no tools") and error.startswith(f"error: {expected}")


def test_user_ids_with_spaces_are_refused() -> None:
    for result in parley_all(
        (NOWHERE, ["send", "--session", "s", "--user", "al ice", "hi"]),
        (NOWHERE, ["list", "--user", "al ice"]),
        (NOWHERE, ["chat", "--session", "s", "--user", "al ice"]),
    ):
        assert_one_line_error(result, "user id 'al ice' is not valid")


def test_send_needs_one_non_empty_message(tmp_path: Path) -> None:
    who = ["send", "--session", "s", "--user", "bob"]
    text, binary = tmp_path / "message.txt", tmp_path / "binary.txt"
    text.write_text("hello")
    binary.write_bytes(b"\xff\xfe caf\xe9")
    empty, both, not_utf8 = parley_all(
        (NOWHERE, who, "\n"),  # piped in, and empty
        (NOWHERE, [*who, "hi", "--file", str(text)]),
        (NOWHERE, [*who, "--file", str(binary)]),
    )
    assert_one_line_error(empty, "the message is empty")
    assert_one_line_error(both, "give the message as TEXT or with --file, not both")
    assert_one_line_error(not_utf8, f"{binary} is not UTF-8 text")


def test_connection_failures_are_told_in_the_words_of_the_os_or_the_server() -> None:
    from parley.client import _connect_reason

    for raw, reason in [
        (
            "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
            'ConnectError(ConnectError("dns error", Custom { kind: Uncategorized, error: '
            '"failed to lookup address information: Name or service not known" })))',
            "failed to lookup address information: Name or service not known",
        ),
        (
            "Failed client connect: `get_system_info` call error after connection: Status { "
            'code: Internal, message: "h2 protocol error: http2 error", source: Some(tonic::'
            'transport::Error(Transport, hyper::Error(Http2, Error { kind: GoAway(b"", '
            "FRAME_SIZE_ERROR, Library) }))) }",
            "h2 protocol error: http2 error",
        ),
        ("Failed client connect: something new (tonic::x)", "something new"),
    ]:
        assert _connect_reason(RuntimeError(raw)) == reason


def test_chat_answers_are_words_shortcuts_or_unambiguous_beginnings() -> None:
    from parley.cli.chat import parse_decision

    for answer, action in [
        ("a", "approve"),
        ("e", "edit"),
        ("r", "reject"),
        ("s", "respond"),
        ("respond", "respond"),
        ("Respond ", "respond"),
        ("res", "respond"),
        ("rej", "reject"),
        ("approve", "approve"),
        ("re", None),  # reject or respond?
        ("yes", None),
        ("", None),
    ]:
        assert parse_decision(answer) == action, answer


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
