"""The console scripts for the CLI tests: run ``parley`` (one command, or several at
once; or against a test's worker, ``parley_against``), what a refusal must look like
(one plain line), and the ``temporal`` CLI against the test's server. Client side."""

from __future__ import annotations

import asyncio
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client

from parley.cli.binaries import temporal_cli
from parley.client import Conversations
from tests.support.processes import PARLEY

#: Nothing listens there: a command that got as far as connecting would say so.
NOWHERE = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"}


def parley(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARLEY, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


def parley_all(
    *calls: tuple[dict[str, str], list[str]] | tuple[dict[str, str], list[str], str],
) -> list[subprocess.CompletedProcess[str]]:
    """Run independent commands at once (``(env, args[, stdin])`` each): the console
    script spends its first second importing."""

    def run(call: tuple[Any, ...]) -> subprocess.CompletedProcess[str]:
        env, args, *stdin = call
        return parley(env, *args, stdin=stdin[0] if stdin else "")

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


async def parley_against(
    conversations: Conversations, client: Client, *args: str
) -> subprocess.CompletedProcess[str]:
    """``parley ARGS`` (in a thread) against the test's server and the task queue of its
    worker (``conversations``), in the test's environment otherwise."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
    }
    return await asyncio.to_thread(parley, env, *args)


def temporal(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``temporal`` CLI against the test's dev server."""
    return subprocess.run(
        [
            temporal_cli(),
            *args,
            "--address",
            client.service_client.config.target_host,
            "--namespace",
            client.namespace,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 1, result
    assert expected in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
