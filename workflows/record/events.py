"""AG-UI events for a conversation, built inside the workflow. Workflow side: deterministic.

Every event is one JSON object (AG-UI's camelCase wire form) appended to the
conversation's event log; its index in the log is its offset, so a client that read up
to offset N resumes with ``events(after=N)``. Timestamps come from ``workflow.now()``.
:class:`EventLog` is the one writer of the log (``ConversationState.events``): it appends
and keeps it bounded (:meth:`EventLog.trim`).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ag_ui.core import (
        BaseEvent,
        CustomEvent,
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

    from parley.contracts import (
        KEPT_EVENTS,
        EventPage,
        OffsetEvent,
        PendingCall,
        ToolCatalogue,
    )
    from parley.contracts.names import (
        COMPACTED_EVENT,
        DECISION_REFUSED_EVENT,
        STREAM_DISCARDED_EVENT,
    )
    from parley.contracts.state import EventWindow


def decision_schema(call: PendingCall, catalogue: ToolCatalogue) -> dict[str, Any]:
    """The JSON Schema of an answer to ``call``'s interrupt: one ``Decision`` (its
    ``tool_call_id`` is the interrupt's id). ``args`` is the tool's own schema."""
    spec = catalogue.get(call.name)
    args_schema: dict[str, Any] = dict(spec.args_schema) if spec else {"type": "object"}
    if spec and not spec.extra_args_allowed:
        args_schema["additionalProperties"] = False
    return {
        "type": "object",
        "required": ["action"],
        "additionalProperties": False,
        "properties": {
            "action": {"enum": ["approve", "edit", "reject", "respond"]},
            "args": {**args_schema, "description": "the new arguments (edit only)"},
            "message": {
                "type": "string",
                "description": "why (reject), or the answer the model reads (respond)",
            },
            "remember": {
                "type": "boolean",
                "default": False,
                "description": "approve or reject later calls of the same tool with the "
                "same arguments in this conversation the same way",
            },
            "remember_seconds": {
                "type": "integer",
                "minimum": 1,
                "description": "how long a remembered decision lasts (with remember only); "
                "unset: the policy file's default, else the rest of the conversation",
            },
            "args_hash": {
                "type": "string",
                "description": "the arguments seen (the interrupt's metadata.args_hash): "
                "refused if the call's arguments changed since",
            },
            "preview_hash": {
                "type": "string",
                "description": "the preview seen (metadata.preview.hash): refused if the "
                "call's preview changed since",
            },
        },
    }


class EventLog:
    """Appends AG-UI events to the conversation state's event log."""

    def __init__(self, window: EventWindow, thread_id: str) -> None:
        self._window = window
        self._thread_id = thread_id

    def _emit(self, event: BaseEvent) -> None:
        event.timestamp = int(workflow.now().timestamp() * 1000)
        self._window.entries.append(event.model_dump(mode="json", by_alias=True, exclude_none=True))

    def trim(self) -> None:
        """Keep the latest ``KEPT_EVENTS`` (an offset still names the same event)."""
        self._window.keep_latest(KEPT_EVENTS)

    def run_started(self, run_id: str) -> None:
        self._emit(RunStartedEvent(thread_id=self._thread_id, run_id=run_id))

    def text_message(self, message_id: str, text: str) -> None:
        self.text_start(message_id)
        self.text_content(message_id, text)
        self.text_end(message_id)

    def text_start(self, message_id: str) -> None:
        self._emit(TextMessageStartEvent(message_id=message_id, role="assistant"))

    def text_content(self, message_id: str, delta: str) -> None:
        self._emit(TextMessageContentEvent(message_id=message_id, delta=delta))

    def text_end(self, message_id: str) -> None:
        self._emit(TextMessageEndEvent(message_id=message_id))

    def compacted(self, detail: dict[str, Any]) -> None:
        """The model's view of the conversation was compacted (``model_calls``)."""
        self._emit(CustomEvent(name=COMPACTED_EVENT, value=detail))

    def stream_discarded(self, message_id: str, reason: str) -> None:
        self._emit(
            CustomEvent(
                name=STREAM_DISCARDED_EVENT, value={"messageId": message_id, "reason": reason}
            )
        )

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

    def tool_result(self, message_id: str, tool_call_id: str, envelope: dict[str, Any]) -> None:
        """The envelope travels as one JSON string: payload included, parsed once (F5).
        Large content and payloads arrive as previews that say so (``content_chars``,
        ``payload_omitted_bytes``)."""
        self._emit(
            ToolCallResultEvent(
                message_id=message_id,
                tool_call_id=tool_call_id,
                content=json.dumps(envelope, ensure_ascii=False),
                role="tool",
            )
        )

    def run_finished(
        self, run_id: str, pending: list[PendingCall], catalogue: ToolCatalogue
    ) -> None:
        """Ends a turn; one interrupt per pending call, answered by a resume entry whose
        ``payload`` is a decision (``responseSchema``)."""
        outcome: RunFinishedInterruptOutcome | RunFinishedSuccessOutcome
        if pending:
            outcome = RunFinishedInterruptOutcome(
                interrupts=[
                    Interrupt(
                        id=call.tool_call_id,
                        reason="tool_call",
                        message=call.waiting_message(),
                        tool_call_id=call.tool_call_id,
                        expires_at=call.expires_at.isoformat(),
                        response_schema=decision_schema(call, catalogue),
                        metadata=call.interrupt_metadata(),
                    )
                    for call in pending
                ]
            )
        else:
            outcome = RunFinishedSuccessOutcome()
        self._emit(RunFinishedEvent(thread_id=self._thread_id, run_id=run_id, outcome=outcome))

    def run_error(self, message: str, code: str) -> None:
        self._emit(RunErrorEvent(message=message, code=code))

    def custom(self, name: str, value: Any) -> None:
        """A ``CUSTOM`` event of Parley's own (``name`` starts with ``parley.``)."""
        self._emit(CustomEvent(name=name, value=value))

    def decision_refused(self, decided_by: str, error_type: str, message: str) -> None:
        self._emit(
            CustomEvent(
                name=DECISION_REFUSED_EVENT,
                value={"decided_by": decided_by, "type": error_type, "message": message},
            )
        )

    @property
    def last_offset(self) -> int:
        """The offset of the latest event (-1 before the first)."""
        return self._window.total - 1

    def page(self, after: int, limit: int) -> EventPage:
        """Events with offset > ``after``, at most ``limit``, from what is kept."""
        first_kept = self._window.offset
        start = max(after + 1, first_kept)
        kept = self._window.entries[start - first_kept : start - first_kept + limit]
        page = [OffsetEvent(offset=start + i, event=event) for i, event in enumerate(kept)]
        return EventPage(
            events=page,
            next_after=page[-1].offset if page else max(after, start - 1),
            first_kept=first_kept,
            latest=self.last_offset,
        )
