"""`parley dev` for the CLI tests: the real console script in a subprocess (embedded
Temporal dev server, UI, gateway, plans service and the offline model), what it
prints, and the helpers that run the console script against it; the ``dev_server``
fixture is one for a test module (registered as a plugin in tests/conftest.py). Client
side."""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from parley.cli.dev_state import state_file
from tests.support import cli
from tests.support.ports import free_port
from tests.support.processes import PARLEY

#: Keys of the ``dev_server`` fixture that are not environment variables.
FIXTURE_KEYS = ("data_dir", "ui", "gateway", "banner", "pid")
#: What each running dev server printed, by its ``pid`` key.
DEV_OUTPUTS: dict[str, DevOutput] = {}


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


class DevOutput:
    """Everything a process prints on its pipe, read by a thread (a full pipe would
    block the process) and on demand: ``text()`` first reads what the pipe holds, so
    whatever the process printed before a command of the test returned is in it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._data = bytearray()
        self._closed = False
        self._changed = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _read_ready(self) -> None:
        """Read what the pipe holds now (the caller holds the condition's lock)."""
        while not self._closed and select.select([self._fd], [], [], 0)[0]:
            chunk = os.read(self._fd, 1 << 16)
            self._closed = not chunk
            self._data += chunk
        self._changed.notify_all()

    def _pump(self) -> None:
        while not self._closed:
            select.select([self._fd], [], [], 1.0)
            with self._changed:
                self._read_ready()

    def text(self) -> str:
        with self._changed:
            self._read_ready()
            return self._data.decode(errors="replace")

    def wait_for(self, wanted: str, timeout: float) -> str:
        """The output once it holds ``wanted`` (or the process closed its end)."""
        with self._changed:
            self._changed.wait_for(
                lambda: wanted in self._data.decode(errors="replace") or self._closed, timeout
            )
            return self._data.decode(errors="replace")


@contextmanager
def running_dev_server(
    data_dir: Path, extra_env: dict[str, str] | None = None, cwd: Path | None = None
) -> Iterator[dict[str, str]]:
    """`parley dev` on free ports, as a user runs it (with ``extra_env`` set for it
    alone, in ``cwd``); yields a client's environment plus the ``FIXTURE_KEYS``. Stopped with
    SIGTERM, which must stop its Temporal server too and remove the file that tells
    `parley tools` about its worker."""
    port, ui_port, plans_port = free_port(), free_port(), free_port()
    gateway_port = free_port()
    env = {
        **os.environ,
        "PARLEY_TASK_QUEUE": "parley-dev-test",
        # Large payloads of these tests go to the test's directory, not the user's.
        "PARLEY_PAYLOAD_STORE": str(data_dir / "payloads"),
    }
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
            "--gateway-port",
            str(gateway_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**env, **(extra_env or {})},
        cwd=cwd,
    )
    assert process.stdout is not None
    output = DevOutput(process.stdout.fileno())
    banner = output.wait_for("Ctrl-C stops everything", timeout=60)
    assert "Parley dev is running" in banner, banner
    client_env = {**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    DEV_OUTPUTS[str(process.pid)] = output
    try:
        yield {
            "data_dir": str(data_dir),
            "ui": f"http://127.0.0.1:{ui_port}",
            "gateway": f"http://127.0.0.1:{gateway_port}",
            "banner": banner,
            "pid": str(process.pid),
            **client_env,
        }
    finally:
        DEV_OUTPUTS.pop(str(process.pid), None)
        children = children_of(process.pid)
        process.terminate()  # SIGTERM, as a service manager stops it
        process.wait(timeout=30)
    # The Temporal dev server it started is stopped with it, not left running, and the
    # file that told `parley tools` about its worker is gone.
    assert "temporal" in children.values(), children
    assert not state_file(port).exists()
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if alive(pid)], f"left running: {children}"


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One ``parley dev`` for the module: its client's environment and ``FIXTURE_KEYS``."""
    with running_dev_server(tmp_path_factory.mktemp("parley-dev")) as server:
        yield server


def parley_all(env: dict[str, str], *calls: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands at once, all with ``env`` (``tests.support.cli.parley_all``)."""
    return cli.parley_all(*((env, args) for args in calls))


def without_paths(dev_server: dict[str, str]) -> dict[str, str]:
    """The environment of a client of the dev server (the fixture's own keys left out)."""
    return {k: v for k, v in dev_server.items() if k not in FIXTURE_KEYS}
