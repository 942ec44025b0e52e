"""A stand-in for the Temporal workflow API, so that one workflow job runs in a plain
test: no server, no worker, no sandbox.

:func:`install` replaces what the jobs ask of ``temporalio.workflow`` (the clock, the
update in progress, ``wait_condition``, ``patched``, ``info``, the metric meter) for one
test; :func:`context` builds the conversation's context (``View``, ``Records``) over a
fresh state, as ``ConversationWorkflow.__init__`` does.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio import workflow

from parley.contracts import ConversationStart, ConversationState
from parley.workflows.context import Records, View

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass
class FakeWorkflow:
    """What the fake API answers; a test changes ``update_id`` to stand in an update."""

    now: datetime = NOW
    update_id: str | None = None
    run_id: str = "run-a"
    history_length: int = 10
    #: Metric name -> total added.
    metrics: Counter[str] = field(default_factory=Counter)

    def info(self) -> SimpleNamespace:
        return SimpleNamespace(
            run_id=self.run_id,
            workflow_id="conversation-s",
            parent=None,
            get_current_history_size=lambda: 1_000,
            get_current_history_length=lambda: self.history_length,
            is_continue_as_new_suggested=lambda: False,
            is_target_worker_deployment_version_changed=lambda: False,
        )

    def meter(self) -> SimpleNamespace:
        def counter(name: str, _description: str) -> SimpleNamespace:
            def add(amount: int, _labels: Any = None) -> None:
                self.metrics[name] += amount

            return SimpleNamespace(add=add)

        return SimpleNamespace(create_counter=counter)


async def _wait_condition(fn: Callable[[], bool], **_: Any) -> None:
    """As the workflow's: returns once ``fn()`` holds, checked as other tasks run (its
    ``timeout`` is not kept: a test that waits for ever fails by pytest's own)."""
    while not fn():  # noqa: ASYNC110 (a condition, as Temporal checks it, not an event)
        await asyncio.sleep(0)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeWorkflow:
    fake = FakeWorkflow()
    update = lambda: SimpleNamespace(id=fake.update_id) if fake.update_id else None  # noqa: E731
    monkeypatch.setattr(workflow, "now", lambda: fake.now)
    monkeypatch.setattr(workflow, "current_update_info", update)
    monkeypatch.setattr(workflow, "wait_condition", _wait_condition)
    monkeypatch.setattr(workflow, "patched", lambda _id: True)
    monkeypatch.setattr(workflow, "info", fake.info)
    monkeypatch.setattr(workflow, "metric_meter", fake.meter)
    return fake


def context(**state: Any) -> tuple[View, Records]:
    """The context of a new conversation of alice's (``state``: fields to set)."""
    conversation = ConversationState(session_id="s", user_id="alice", **state)
    start = ConversationStart(session_id="s", user_id="alice")
    return View(conversation, start), Records.of(conversation)
