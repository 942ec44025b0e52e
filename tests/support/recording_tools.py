"""Tools for workflow tests: real tools that record every run (``RUNS``), one per row
of the error table, and the registry that offers them. They run in the test's own
worker (activity side); the model is the only fake (tests.support.scripts)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from langchain_core.tools import InjectedToolArg, tool

from parley.contracts import ToolContext
from parley.contracts.errors import ToolInputError, TransientError
from parley.tools import ParleyTool, ToolRegistry, auto, confirm, deny

RUNS: list[dict[str, Any]] = []


def runs_of(name: str) -> list[dict[str, Any]]:
    return [r for r in RUNS if r["tool"] == name]


def _record(name: str, context: ToolContext, **args: Any) -> None:
    RUNS.append({"tool": name, "user_id": context.user_id, "key": context.idempotency_key, **args})


@tool
async def write_record(title: str, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Write a record (changes the world, so it needs confirmation)."""
    _record("write_record", context, title=title)
    return {"written": title, "by": context.user_id}


@tool
async def read_records(context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """Read the records (harmless)."""
    _record("read_records", context)
    return f"{len(runs_of('write_record'))} records"


@tool
async def strict_write(count: int, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Write `count` items; at most 10 (more is a 422 from the backend)."""
    _record("strict_write", context, count=count)
    if count > 10:
        raise ToolInputError(
            "count must be at most 10",
            http_status=422,
            body={"message": "count must be at most 10"},
        )
    return {"wrote": count}


@tool
async def guarded_write(target: str, context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """Write to a guarded target."""
    _record("guarded_write", context, target=target)
    raise PermissionError(f"{target} is read-only for this user")


@tool
async def buggy_tool(context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """A tool with a programming error."""
    _record("buggy_tool", context)
    raise ValueError("unexpected None in config")


_FLAKY_FAILURES: dict[str, int] = {}


@tool
async def flaky_read(context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """A read whose backend fails twice before answering."""
    _record("flaky_read", context)
    seen = _FLAKY_FAILURES.get(context.idempotency_key, 0)
    if seen < 2:
        _FLAKY_FAILURES[context.idempotency_key] = seen + 1
        raise TransientError("backend unavailable", http_status=503, retry_after=0.1)
    return "fresh data"


@tool
def drop_tables() -> str:
    """Drop every table."""
    RUNS.append({"tool": "drop_tables"})
    return "dropped"


def registry(*extra: ParleyTool) -> ToolRegistry:
    return ToolRegistry(
        [
            confirm(write_record),
            auto(read_records),
            confirm(strict_write),
            auto(guarded_write),
            auto(buggy_tool),
            auto(flaky_read),
            deny(drop_tables),
            auto(slow_read),
            *extra,
        ]
    )


GATE = asyncio.Event()
SLOW_STARTED = asyncio.Event()


@tool
async def slow_read(context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """A read that waits until the test opens GATE."""
    _record("slow_read", context)
    SLOW_STARTED.set()
    await GATE.wait()
    return "slow data"
