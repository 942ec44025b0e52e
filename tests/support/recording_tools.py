"""Tools for workflow tests: real tools that record every run, one per row of the
error table. The model is the only fake (a script); tools and Temporal are real."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import InjectedToolArg, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel
from pydantic import Field

from parley.contracts import ToolContext
from parley.errors import ToolInputError, TransientError
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


def script(*entries: dict[str, Any]) -> ScriptFileChatModel:
    """A model that answers the N-th call with entries[N]."""
    return ScriptFileChatModel(entries=[ScriptEntry.model_validate(e) for e in entries])


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "args": args}


#: (first human message of the conversation, tool names it was offered), per call of a
#: ``ByConversation`` model.
OFFERED: list[tuple[str, list[str]]] = []


class ByConversation(BaseChatModel):
    """Scripted models, one per conversation: the conversation's first human message
    (the user's message, or a subagent's task) picks the script. Records in ``OFFERED``
    the tools each call was offered."""

    scripts: dict[str, ScriptFileChatModel]
    offered: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "parley-test-by-conversation"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ByConversation:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.model_copy(update={"offered": names})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        first = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
        OFFERED.append((first, list(self.offered)))
        return self.scripts[first]._generate(messages)


GATE = asyncio.Event()
SLOW_STARTED = asyncio.Event()


@tool
async def slow_read(context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """A read that waits until the test opens GATE."""
    _record("slow_read", context)
    SLOW_STARTED.set()
    await GATE.wait()
    return "slow data"


def slow_write_worker_env(
    client: Any, payload_store: Any, home: Any, call_id: str, *, queue: str
) -> dict[str, str]:
    """The environment of a ``parley worker`` process on ``client``'s server whose model
    proposes ``slow_write`` (``call_id``, ``tests/liveness_tools.py``) then answers
    "written"; its script and tool log live in ``home``."""
    import json
    import os
    from pathlib import Path

    script = Path(home) / "script.json"
    script.write_text(
        json.dumps(
            [
                {"content": "", "tool_calls": [call("slow_write", call_id, title="fuzz")]},
                {"content": "written"},
            ]
        )
    )
    return {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "PARLEY_TASK_QUEUE": queue,
        "PARLEY_MODEL": f"script:{script}",
        "PARLEY_TOOLS": "tests.liveness_tools:toolset",
        "PARLEY_TEST_TOOL_LOG": str(Path(home) / "tool.log"),
        "PARLEY_PAYLOAD_STORE": str(payload_store.root),
    }
