"""AG-UI events for a conversation, built inside the workflow. Workflow side: deterministic.

Every event is one JSON object (AG-UI's camelCase wire form) appended to the
conversation's event log; its index in the log is its offset, so a client that read up
to offset N resumes with ``events(after=N)``. Timestamps come from ``workflow.now()``.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ag_ui.core import (
        BaseEvent,
        Interrupt,
        RunErrorEvent,
        RunFinishedEvent,
        RunFinishedInterruptOutcome,
        RunFinishedSuccessOutcome,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )

    from parley.contracts import PendingCall, ToolResult


class EventLog:
    """Appends AG-UI events to ``events`` (the list kept in the workflow's state)."""

    def __init__(self, events: list[dict[str, Any]], thread_id: str) -> None:
        self._events = events
        self._thread_id = thread_id

    def _emit(self, event: BaseEvent) -> None:
        event.timestamp = int(workflow.now().timestamp() * 1000)
        self._events.append(event.model_dump(mode="json", by_alias=True, exclude_none=True))

    def run_started(self, run_id: str) -> None:
        self._emit(RunStartedEvent(thread_id=self._thread_id, run_id=run_id))

    def text_message(self, message_id: str, text: str) -> None:
        self._emit(TextMessageStartEvent(message_id=message_id, role="assistant"))
        self._emit(TextMessageContentEvent(message_id=message_id, delta=text))
        self._emit(TextMessageEndEvent(message_id=message_id))

    def tool_call(
        self, tool_call_id: str, name: str, args: dict[str, Any], parent_message_id: str | None
    ) -> None:
        self._emit(
            ToolCallStartEvent(
                tool_call_id=tool_call_id,
                tool_call_name=name,
                parent_message_id=parent_message_id,
            )
        )
        self._emit(ToolCallArgsEvent(tool_call_id=tool_call_id, delta=json.dumps(args)))
        self._emit(ToolCallEndEvent(tool_call_id=tool_call_id))

    def tool_result(self, message_id: str, tool_call_id: str, result: ToolResult) -> None:
        """The envelope travels as one JSON string: payload included, parsed once (F5)."""
        self._emit(
            ToolCallResultEvent(
                message_id=message_id,
                tool_call_id=tool_call_id,
                content=result.model_dump_json(),
                role="tool",
            )
        )

    def run_finished(self, run_id: str, pending: list[PendingCall]) -> None:
        outcome: RunFinishedInterruptOutcome | RunFinishedSuccessOutcome
        if pending:
            outcome = RunFinishedInterruptOutcome(
                interrupts=[
                    Interrupt(
                        id=call.tool_call_id,
                        reason="tool_approval",
                        message=f"{call.name} waits for your decision",
                        tool_call_id=call.tool_call_id,
                        expires_at=call.expires_at.isoformat(),
                        metadata={"name": call.name, "args": call.args},
                    )
                    for call in pending
                ]
            )
        else:
            outcome = RunFinishedSuccessOutcome()
        self._emit(RunFinishedEvent(thread_id=self._thread_id, run_id=run_id, outcome=outcome))

    def run_error(self, message: str, code: str) -> None:
        self._emit(RunErrorEvent(message=message, code=code))
