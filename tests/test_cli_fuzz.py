"""End to end: bad input at the CLI: hypothesis draws commands with malformed session
and user ids, empty, odd and oversized texts, invalid or ill-typed ``--args`` JSON, and
runs them through the real ``parley`` app (in-process, Typer's runner) against a real
worker process and the session's dev server. Each answers with exit code 0, or 1 and one
``error:`` line (2 for a usage error Typer itself reports): never a traceback. A
conversation waiting throughout is approved afterwards as if nothing happened.

``PARLEY_CLI_FUZZ=N`` sets the number of commands (default 60).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from parley.cli import app
from parley.storage import LocalFileStorageDriver
from tests.support.processes import PARLEY_MODULE, process, slow_write_worker_env

EXAMPLES = int(os.environ.get("PARLEY_CLI_FUZZ", "60"))
WAITING = f"cli-fuzz-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cli_env(
    isolated_temporal_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("cli-fuzz")
    queue = f"parley-cli-fuzz-{uuid.uuid4().hex[:8]}"
    worker_env = slow_write_worker_env(
        isolated_temporal_env.client, payload_store, home, "f1", queue=queue
    )
    env = {
        name: worker_env[name]
        for name in (
            "TEMPORAL_ADDRESS",
            "TEMPORAL_NAMESPACE",
            "PARLEY_TASK_QUEUE",
            "PARLEY_PAYLOAD_STORE",
        )
    }
    env["PARLEY_WORKER_WAIT_SECONDS"] = "30"
    log = home / "worker.log"
    with process([*PARLEY_MODULE, "worker"], worker_env, log):
        deadline = time.monotonic() + 90
        while "worker on task queue" not in log.read_text():
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.2)
        sent = run(env, "send", "--session", WAITING, "--user", "carol", "write it")
        assert sent.exit_code == 0, sent.output
        yield env


def run(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=True)


IDS = st.one_of(
    st.from_regex(r"[A-Za-z0-9._-]{1,24}", fullmatch=True),
    st.text(max_size=40),
    st.just("x" * 300),
    st.just("default"),
)
TEXTS = st.one_of(
    st.text(max_size=80),
    st.just(""),
    st.just("   \n\t"),
    st.integers(1, 3).map(lambda n: "y" * (n * 700_000)),  # past 1 MB from the second on
)
ARGS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(['{"title": 5}', "[1, 2]", "null", '{"title": "x"}', "{", '"x"']),
)
COMMANDS = st.one_of(
    st.tuples(st.just("send"), IDS, IDS, TEXTS).map(
        lambda c: ["send", "--session", c[1], "--user", c[2], c[3]]
    ),
    st.tuples(st.sampled_from(["approve", "show", "events", "end"]), IDS, IDS).map(
        lambda c: [c[0], "--session", c[1], "--user", c[2]]
    ),
    st.tuples(IDS, IDS, TEXTS).map(
        lambda c: ["reject", "--session", c[0], "--user", c[1], "--message", c[2]]
    ),
    st.tuples(IDS, IDS, ARGS).map(
        lambda c: ["edit", "--session", c[0], "--user", c[1], "--args", c[2], "f1"]
    ),
    st.tuples(IDS, st.integers(-5, 5000).map(str)).map(
        lambda c: ["list", "--user", c[0], "--limit", c[1]]
    ),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=COMMANDS)
def test_every_generated_command_answers_clearly(
    cli_env: dict[str, str], command: list[str]
) -> None:
    result = run(cli_env, *command)
    shown = f"{command[:6]!r:.300} -> {result.exit_code}: {result.output[-600:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), shown
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback" not in result.output, shown
    if result.exit_code == 1:
        assert "error:" in result.output, shown


def test_the_waiting_conversation_is_unharmed_after_the_fuzzing(cli_env: dict[str, str]) -> None:
    approved = run(cli_env, "approve", "--session", WAITING, "--user", "carol")
    assert approved.exit_code == 0, approved.output
    assert "written" in approved.output
