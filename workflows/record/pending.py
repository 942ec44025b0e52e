"""The pending calls: the one owner of the conversation's list of calls that wait for a
decision (``state.pending``). Workflow side (deterministic).

A call joins when triage (or an edit) says it waits, or when a subagent reports it; it
leaves when it is decided, expires, the conversation ends, or its subagent reports
again or ends. Every call that leaves is counted here, once
(``parley_approvals_answered``); the turn that announces new ones counts those. A turn
that fails closed drops the list without counting it: nothing was answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from parley.contracts import ConversationState, PendingCall, ToolPreview
from parley.workflows.record import metrics


class PendingCalls:
    def __init__(self, state: ConversationState) -> None:
        self._state = state

    def __iter__(self) -> Iterator[PendingCall]:
        return iter(list(self._state.pending))

    def __len__(self) -> int:
        return len(self._state.pending)

    def __bool__(self) -> bool:
        return bool(self._state.pending)

    def ids(self) -> set[str]:
        return {call.tool_call_id for call in self._state.pending}

    def own(self) -> list[PendingCall]:
        """The calls this conversation made (a subagent's keep their own deadlines)."""
        return [call for call in self._state.pending if call.subagent is None]

    def of_subagent(self, tool_call_id: str) -> list[PendingCall]:
        """The calls of the subagent that the parent's call ``tool_call_id`` started."""
        return [
            call
            for call in self._state.pending
            if call.subagent is not None and call.subagent.tool_call_id == tool_call_id
        ]

    def escalate(self, call: PendingCall, until: datetime) -> None:
        """``call`` was escalated (its rule's ``escalate_to`` is told): it waits until
        ``until``, once more."""
        assert call.on_timeout is not None
        call.on_timeout.escalated = True
        call.expires_at = until

    def add(self, call: PendingCall) -> None:
        self._state.pending.append(call)

    def show_preview(
        self, tool_call_id: str, preview: ToolPreview, *, approvals_void: bool = False
    ) -> None:
        """The call (still pending) shows ``preview``: what it would change now. With
        ``approvals_void``, a quorum's approvals so far go: they were of another preview."""
        for call in self._state.pending:
            if call.tool_call_id == tool_call_id:
                call.preview = preview
                if approvals_void:
                    call.approvals = []

    def take_all(self) -> list[PendingCall]:
        """Every call, answered now (a decision names them all)."""
        calls, self._state.pending = self._state.pending, []
        metrics.approvals_answered(len(calls))
        return calls

    def remove(self, calls: list[PendingCall]) -> None:
        """``calls`` leave, answered (expired, or their subagent ended)."""
        self._state.pending = [c for c in self._state.pending if c not in calls]
        metrics.approvals_answered(len(calls))

    def replace_for_subagent(self, tool_call_id: str, calls: list[PendingCall]) -> None:
        """A subagent reported what it waits on now: its calls replace the ones it
        reported before; those that stopped waiting there were answered there."""
        before = self.of_subagent(tool_call_id)
        self._state.pending = [c for c in self._state.pending if c not in before] + calls
        metrics.approvals_answered(
            len({c.tool_call_id for c in before} - {c.tool_call_id for c in calls})
        )

    def remove_subagents(self) -> None:
        """Every subagent's call leaves (the subagents were stopped: never run)."""
        theirs = [c for c in self._state.pending if c.subagent is not None]
        self.remove(theirs)

    def abandon(self) -> None:
        """A turn failed closed: the list is dropped, nothing was answered."""
        self._state.pending = []
