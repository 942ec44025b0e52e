"""The worker's workflow runner (``parley.workflow_runner``) gives every payload the
serialization and store context the SDK's sandboxed instance would: checked for every
question the SDK asks during real conversations on the dev server (a model call, an
``auto`` tool, a ``confirm`` tool and its decision, a subagent as a child workflow that
signals its parent), by asking the SDK's own instance the same question each time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.api.enums.v1 import CommandType
from temporalio.converter import WorkflowSerializationContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import parley.worker
from parley.contracts import Decision, SubagentSpec
from parley.tools import ToolRegistry, auto, confirm
from parley.workflow_runner import (
    ContextCachingSandboxedWorkflowRunner,
    ContextCachingWorkflowInstance,
)
from tests.support import ByConversation, call, read_records, script, write_record
from tests.support.transcripts import new_session, runs_in

#: (question, "none" or "command", "asked" | "sdk"): how many questions the SDK asked
#: the wrapped instance, and how many of those the wrapper passed on to the sandbox.
COUNTS: Counter[tuple[str, str, str]] = Counter()
#: (question, command info, the wrapper's answer, the SDK's answer) where they differ.
MISMATCHES: list[tuple[str, Any, Any, Any]] = []
#: The command types asked about, and whether any command got a context that is not
#: the workflow's own (so answering every command with it would be caught).
COMMAND_TYPES: set[int] = set()
OTHER_THAN_OWN: list[Any] = []


class _CountingInstance(WorkflowInstance):
    """The SDK's instance, counting the context questions that reach it."""

    def __init__(self, sdk: WorkflowInstance) -> None:
        self.sdk = sdk

    def activate(self, act: Any) -> Any:
        return self.sdk.activate(act)

    def get_serialization_context(self, command_info: Any) -> Any:
        COUNTS["context", _kind(command_info), "sdk"] += 1
        return self.sdk.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        COUNTS["store", _kind(command_info), "sdk"] += 1
        return self.sdk.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self.sdk.get_info()

    def get_thread_id(self) -> int | None:
        return self.sdk.get_thread_id()


class _CheckedInstance(ContextCachingWorkflowInstance):
    """The runner's instance; each answer is compared with the SDK's, asked directly."""

    def __init__(self, sdk: WorkflowInstance) -> None:
        super().__init__(_CountingInstance(sdk))
        self.sdk = sdk
        info = sdk.get_info()
        self.own = WorkflowSerializationContext(
            namespace=info.namespace, workflow_id=info.workflow_id
        )

    def get_serialization_context(self, command_info: Any) -> Any:
        got = super().get_serialization_context(command_info)
        self._compare("context", command_info, got, self.sdk.get_serialization_context)
        return got

    def get_external_store_context(self, command_info: Any) -> Any:
        got = super().get_external_store_context(command_info)
        self._compare("store", command_info, got, self.sdk.get_external_store_context)
        return got

    def _compare(self, question: str, command_info: Any, got: Any, ask: Any) -> None:
        COUNTS[question, _kind(command_info), "asked"] += 1
        want = ask(command_info)
        if got != want or type(got) is not type(want):
            MISMATCHES.append((question, command_info, got, want))
        if command_info is not None:
            COMMAND_TYPES.add(command_info.command_type)
            if question == "context" and want != self.own:
                OTHER_THAN_OWN.append(want)


@dataclass(frozen=True)
class _CheckedRunner(ContextCachingSandboxedWorkflowRunner):
    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CheckedInstance(SandboxedWorkflowRunner.create_instance(self, det))


def _kind(command_info: Any) -> str:
    return "none" if command_info is None else "command"


RECORDER = SubagentSpec(
    name="recorder", description="Writes records; nothing else.", tools=["write_record"]
)


@pytest.fixture
def checked_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """``build_worker`` builds its worker with the checking runner."""
    for seen in (COUNTS, MISMATCHES, COMMAND_TYPES, OTHER_THAN_OWN):
        seen.clear()
    monkeypatch.setattr(parley.worker, "ContextCachingSandboxedWorkflowRunner", _CheckedRunner)


def test_the_worker_uses_the_caching_sandbox() -> None:
    """The SDK's own sandbox (same restrictions), so plugins that check for it or
    ``dataclasses.replace`` its restrictions keep working."""
    runner = ContextCachingSandboxedWorkflowRunner()
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert runner.restrictions is SandboxedWorkflowRunner().restrictions
    assert isinstance(runner.__class__(restrictions=runner.restrictions), type(runner))


async def test_every_context_is_the_sdks_own_answer(checked_runner, parley_worker) -> None:
    task = f"record Q4 ({new_session()})"
    model = ByConversation(
        scripts={
            "record Q3": script(
                {
                    "tool_calls": [
                        call("read_records", "r1"),
                        call("write_record", "w1", title="Q3"),
                    ]
                },
                {"content": "Recorded Q3."},
                {"tool_calls": [call("recorder", "d1", task=task)]},
                {"content": "The recorder is done."},
            ),
            task: script(
                {"tool_calls": [call("write_record", "c1", title="Q4")]},
                {"content": "Q4 recorded."},
            ),
        }
    )
    tools = ToolRegistry([confirm(write_record), auto(read_records)], subagents=[RECORDER])
    async with parley_worker(tools, model) as conversations:
        sid = new_session()
        # A model call, an auto tool that runs, a confirm call that waits; approved.
        turn = await conversations.send(sid, "alice", "record Q3")
        assert [p.tool_call_id for p in turn.pending] == ["w1"]
        assert len(runs_in(sid, "read_records")) == 1
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="w1", action="approve")]
        )
        assert done.reply == "Recorded Q3."

        # A subagent: a child workflow whose confirm call waits on the parent's list
        # (a signal to the parent), approved there (a signal to the child).
        turn = await conversations.send(sid, "alice", "now have the recorder do Q4")
        assert [p.tool_call_id for p in turn.pending] == ["sub-recorder-1-c1"]
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="sub-recorder-1-c1", action="approve")]
        )
        assert done.reply == "The recorder is done."
        assert len(runs_in(f"{sid}/recorder-1", "write_record")) == 1

    assert MISMATCHES == []
    # The questions were asked, about the commands that matter here ...
    assert {
        CommandType.COMMAND_TYPE_SCHEDULE_ACTIVITY_TASK,
        CommandType.COMMAND_TYPE_START_CHILD_WORKFLOW_EXECUTION,
        CommandType.COMMAND_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION,
    } <= COMMAND_TYPES
    assert OTHER_THAN_OWN  # some commands' contexts are not the workflow's own
    for question in ("context", "store"):
        # ... questions about no command never entered the sandbox ...
        assert COUNTS[question, "none", "asked"] > 0
        assert COUNTS[question, "none", "sdk"] == 0
    # ... and repeated questions about a command were answered from the memo.
    asked, sdk = COUNTS["context", "command", "asked"], COUNTS["context", "command", "sdk"]
    assert 0 < sdk < asked, COUNTS
