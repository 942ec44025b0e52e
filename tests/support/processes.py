"""Real Parley processes for tests: ``parley worker``/``gateway`` (or ``worker.py``)
started in a subprocess with an environment pointing at the test's Temporal server, and
what their model and tools (tests.support.liveness_tools) leave behind. Client side:
the test starts them and reads their logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parley.client import Conversations
from parley.config.settings import Settings
from parley.storage import LocalFileStorageDriver
from tests.support.scripts import call

#: The repository: the working directory of the processes and their PYTHONPATH.
ROOT = Path(__file__).resolve().parents[2]
#: The console script the README's quick start runs (installed next to this Python).
PARLEY = [str(Path(sys.executable).parent / "parley")]
#: The CLI as a module of this Python (no console script needed).
PARLEY_MODULE = [sys.executable, "-m", "parley.cli"]
#: The toolset of ``slow_write`` for ``PARLEY_TOOLS``.
LIVENESS_TOOLS = "tests.support.liveness_tools:toolset"


@contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` running in ROOT, its output appended to ``log``; terminated (then
    killed) on the way out."""
    with log.open("ab") as out:
        started = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        yield started
    finally:
        if started.poll() is None:
            started.terminate()
            try:
                started.wait(timeout=20)
            except subprocess.TimeoutExpired:
                started.kill()
        started.wait(timeout=20)


@contextmanager
def worker_process(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``worker.py`` in its own process, as `parley worker` runs it; killed on the way
    out (a crash, not a shutdown)."""
    with log.open("ab") as out:
        started = subprocess.Popen(
            [sys.executable, "worker.py"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        yield started
    finally:
        if started.poll() is None:
            started.kill()
        started.wait(timeout=30)


def worker_env(address: str, queue: str, payload_store: str | Path, **extra: str) -> dict[str, str]:
    """The environment of a worker, gateway or CLI process on the server at ``address``
    and task queue ``queue``, with ``extra`` variables."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_ADDRESS": address,
        "PARLEY_TASK_QUEUE": queue,
        "PARLEY_PAYLOAD_STORE": str(payload_store),
        **extra,
    }


def cli_env(client: Client, payload_store: LocalFileStorageDriver, queue: str) -> dict[str, str]:
    """:func:`worker_env` for ``client``'s server and namespace."""
    return worker_env(
        client.service_client.config.target_host,
        queue,
        payload_store.root,
        TEMPORAL_NAMESPACE=client.namespace,
    )


def write_slow_write_script(
    path: Path, call_id: str, *, title: str = "once", reply: str = "written once"
) -> Path:
    """A script file whose model proposes ``slow_write`` (``call_id``, ``title``) and
    then answers ``reply``."""
    path.write_text(
        json.dumps(
            [
                {"content": "", "tool_calls": [call("slow_write", call_id, title=title)]},
                {"content": reply},
            ]
        )
    )
    return path


def slow_write_worker_env(
    client: Any, payload_store: Any, home: Any, call_id: str, *, queue: str
) -> dict[str, str]:
    """The environment of a ``parley worker`` process on ``client``'s server whose model
    proposes ``slow_write`` (``call_id``, ``tests/support/liveness_tools.py``) then
    answers "written"; its script and tool log live in ``home``."""
    script = write_slow_write_script(
        Path(home) / "script.json", call_id, title="fuzz", reply="written"
    )
    return {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{script}",
        "PARLEY_TOOLS": LIVENESS_TOOLS,
        "PARLEY_TEST_TOOL_LOG": str(Path(home) / "tool.log"),
    }


def slow_write_worker(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path, call_id: str
) -> tuple[dict[str, str], Conversations, Path]:
    """A worker process environment whose model proposes ``slow_write`` (``call_id``)
    then answers "written once"; the conversations client for its task queue; the
    tool's start log (``tests/support/liveness_tools.py``)."""
    queue = f"parley-live-{uuid.uuid4().hex[:8]}"
    script_file = write_slow_write_script(tmp_path / "script.json", call_id)
    tool_log = tmp_path / "tool.log"
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{script_file}",
        "PARLEY_TOOLS": LIVENESS_TOOLS,
        "PARLEY_TEST_TOOL_LOG": str(tool_log),
    }
    return env, Conversations(client, Settings(task_queue=queue)), tool_log


def tool_starts(tool_log: Path) -> list[dict]:
    """The tool runs that started, one JSON line each (key, pid)."""
    if not tool_log.exists():
        return []
    return [json.loads(line) for line in tool_log.read_text().splitlines()]


def assert_started_twice_done_once(tool_log: Path, key: str, pids: list[int] | None = None) -> None:
    """What a worker killed in the middle of the slow write leaves: the call ``key``
    (``conversation-<sid>:<call id>``) started on two processes (``pids``, in order,
    when given), under the one idempotency key, and wrote once."""
    runs = tool_starts(tool_log)
    assert len(runs) == 2 and runs[0]["pid"] != runs[1]["pid"], runs
    if pids is not None:
        assert [run["pid"] for run in runs] == pids
    assert {run["key"] for run in runs} == {key}
    assert tool_log.with_suffix(".done").read_text().split() == [key]
