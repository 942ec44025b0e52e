"""The official AG-UI client (``@ag-ui/client``'s ``HttpAgent``) in Node, for tests:
the small npm project under tests/js/ installed from its lock file, and one run of
``agui_run.mjs`` against a gateway's ``/agui``. Client side: it speaks only HTTP to
the gateway, as any AG-UI front end would. The ``agui_client`` fixture installs it once
for the session (this module is registered as a plugin in tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: The npm project: package.json pins @ag-ui/client, package-lock.json its tree.
JS_PROJECT = Path(__file__).resolve().parents[1] / "js"
#: Present once the project is installed.
INSTALLED_MARK = JS_PROJECT / "node_modules" / "@ag-ui" / "client" / "package.json"
#: Seconds one run may take, however its gateway answers.
RUN_TIMEOUT = 120


@pytest.fixture(scope="session")
def agui_client() -> Path:
    """tests/js installed (``install_agui_client``)."""
    return install_agui_client()


def install_agui_client() -> Path:
    """``npm ci`` in tests/js (exactly the committed lock file) unless already
    installed; the project's directory. No node or npm is an error, never a skip: CI
    installs them (.ci/run)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not on PATH (Debian: apt-get install nodejs npm)")
    if not INSTALLED_MARK.exists():
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=JS_PROJECT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci in {JS_PROJECT} failed:\n{done.stdout}\n{done.stderr}")
    return JS_PROJECT


@dataclass
class AguiRun:
    """What the HttpAgent saw: each event with the CLOCK_MONOTONIC time it got it (the
    clock of ``time.monotonic()``), and its messages when the run ended."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, kind: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, event) for at, event in self.events if event["type"] == kind]


async def run_http_agent(gateway_url: str, token: str, thread_id: str, text: str) -> AguiRun:
    """One ``HttpAgent.runAgent`` of ``text`` on thread ``thread_id`` against the
    gateway's ``/agui``, with ``token`` as its bearer token."""
    stdout = await _node("agui_run.mjs", RUN_TIMEOUT, f"{gateway_url}/agui", token, thread_id, text)
    run = AguiRun()
    for line in stdout.splitlines():
        record = json.loads(line)
        if "event" in record:
            run.events.append((record["at"], record["event"]))
        else:
            run.messages = record["messages"]
    return run


@dataclass
class AguiStep:
    """One run of an ``agui_session.mjs`` session: its events, and the agent's messages
    and pending interrupts when it ended (or the error the agent failed with)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    pending_interrupts: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]


async def run_agui_session(
    gateway_url: str, token: str, thread_id: str, steps: list[dict[str, Any]]
) -> list[AguiStep]:
    """Runs ``steps`` (see ``tests/js/agui_session.mjs``) with the official HttpAgent,
    one agent per name (a new name is a reloaded page); what each step saw."""
    args = (f"{gateway_url}/agui", token, thread_id, json.dumps(steps))
    stdout = await _node("agui_session.mjs", RUN_TIMEOUT * len(steps), *args)
    seen = [AguiStep() for _ in steps]
    for line in stdout.splitlines():
        record = json.loads(line)
        step = seen[record["step"]]
        if "event" in record:
            step.events.append(record["event"])
        elif "error" in record:
            step.error = record["error"]
        else:
            step.messages = record["messages"]
            step.pending_interrupts = record["pendingInterrupts"]
    return seen


async def _node(script: str, seconds: float, *args: str) -> str:
    """Run one of tests/js's scripts with ``args``; its standard output. A failed run
    (or one past ``seconds``) is the test's failure, with what the script said."""
    project = install_agui_client()
    node = await asyncio.create_subprocess_exec(
        "node",
        str(project / script),
        *args,
        cwd=project,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(seconds):
            stdout, stderr = await node.communicate()
    except TimeoutError:
        node.kill()
        await node.wait()
        raise
    if node.returncode != 0:
        raise AssertionError(f"{script} failed ({node.returncode}): {stderr.decode()}")
    return stdout.decode()
