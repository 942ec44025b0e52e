"""The confirm tool of the worker-kill test (``tests/test_liveness.py``), loaded by a
real ``worker.py`` in another process through
``PARLEY_TOOLS=tests.support.liveness_tools:toolset``.

``slow_write`` logs each start to ``$PARLEY_TEST_TOOL_LOG``; while the file
``<log>.hold`` exists it hangs (heartbeating, as every tool run does), so the test can
kill its worker mid-call. Its side effect, one line per idempotency key in
``<log>.done``, happens at most once per key, as a real idempotent backend would.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated

from langchain_core.tools import InjectedToolArg, tool

from parley.contracts import ToolContext
from parley.tools import ParleyTool, confirm


def _log() -> Path:
    return Path(os.environ["PARLEY_TEST_TOOL_LOG"])


@tool
async def slow_write(title: str, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Write a record (slowly; it needs confirmation)."""
    log = _log()
    start = {"key": context.idempotency_key, "pid": os.getpid()}
    with log.open("a", encoding="utf-8") as out:
        out.write(json.dumps(start) + "\n")
    while log.with_suffix(".hold").exists():  # noqa: ASYNC110 - set by another process
        await asyncio.sleep(0.2)
    done = log.with_suffix(".done")
    keys = done.read_text(encoding="utf-8").split() if done.exists() else []
    if context.idempotency_key not in keys:
        with done.open("a", encoding="utf-8") as out:
            out.write(context.idempotency_key + "\n")
    return {"written": title}


def toolset() -> list[ParleyTool]:
    return [confirm(slow_write)]
