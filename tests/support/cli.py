"""The console script for the CLI tests that need no Temporal server: run it (one
command, or several at once), and what a refusal must look like (one plain line).
Client side."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.support.processes import PARLEY

#: Nothing listens there: a command that got as far as connecting would say so.
NOWHERE = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"}


def parley(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARLEY, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
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


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 1, result
    assert expected in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
