"""The retry contract: a server's Retry-After reaches Temporal as the next retry delay,
capped by the policy; nothing an activity reports carries a worker secret."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Annotated

import pytest
from langchain_core.tools import InjectedToolArg, tool
from temporalio.api.history.v1 import History

from parley.activities.model_calls import _model_failure
from parley.activities.tool_calls import tool_failure
from parley.contracts import MODEL_ACTIVITY, RUN_TOOL, TOOL_ACTIVITY, ToolContext
from parley.contracts.errors import ErrorType, ToolPermissionError, TransientError
from parley.observability.redaction import remember_secrets
from parley.tools import auto
from tests.support import call, registry, script
from tests.support.transcripts import new_session

FAILED_ONCE: set[str] = set()


@tool
async def busy_backend(context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """A backend that asks for 3 s of patience once."""
    if context.idempotency_key not in FAILED_ONCE:
        FAILED_ONCE.add(context.idempotency_key)
        raise TransientError("busy", http_status=503, retry_after=3)
    return "ready"


def last_started(history: History, activity_name: str):
    names = {}
    started = None
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.HasField("activity_task_started_event_attributes"):
            attrs = event.activity_task_started_event_attributes
            if names.get(attrs.scheduled_event_id) == activity_name:
                started = event
    return started


async def test_retry_after_is_the_next_retry_delay(parley_worker) -> None:
    model = script({"content": "", "tool_calls": [call("busy_backend", "b1")]}, {"content": "ok"})
    async with parley_worker(registry(auto(busy_backend)), model) as conv:
        sid = new_session()
        turn = await conv.send(sid, "pat", "go")
        assert turn.results[0].content == "ready"
        history = await conv.handle(sid).fetch_history()
    started = last_started(history, RUN_TOOL)
    attrs = started.activity_task_started_event_attributes
    assert attrs.attempt == 2
    failure = attrs.last_failure.application_failure_info
    assert failure.type == ErrorType.TOOL_TRANSIENT
    assert failure.next_retry_delay.ToTimedelta() == timedelta(seconds=3)  # not the 1 s policy


def test_a_huge_retry_after_is_capped_by_the_policy() -> None:
    day = 86_400
    tool_error = tool_failure(TransientError("come back tomorrow", retry_after=day))
    assert tool_error.next_retry_delay == TOOL_ACTIVITY.retry.maximum_interval
    model_error = _model_failure(TransientError("overloaded", retry_after=day))
    assert model_error.next_retry_delay == MODEL_ACTIVITY.retry.maximum_interval


def test_activity_failures_never_carry_worker_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "plans-secret-9f8e7d6c5b"
    monkeypatch.setenv("PARLEY_PLANS_API_KEY", secret)
    remember_secrets(os.environ)  # as the worker does when it is built
    echoed = ToolPermissionError(
        f"refused key {secret}", http_status=401, body={"echo": f"Authorization: Bearer {secret}"}
    )
    failure = tool_failure(echoed)
    assert secret not in failure.message and secret not in str(failure.details)
    assert "[redacted]" in failure.message

    model_error = _model_failure(RuntimeError(f"bad header Bearer {secret} for sk-abcdef123456"))
    assert secret not in model_error.message and "sk-abcdef123456" not in model_error.message
