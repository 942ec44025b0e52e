"""The undo window: the one writer of ``state.scheduled``. Workflow side (deterministic:
a durable timer per decision, ``workflow.now()``).

A call whose rule says ``undo_seconds`` does not run when it is approved: the decision
schedules it (all of its calls at once, so their windows overlap), announced to
followers (``parley.call_scheduled``) and audited ``scheduled`` (after its ``decided``)
with the instant it runs. The turn then waits, for each call in turn, until its
instant or an ``undo`` by the approver or the owner, whichever comes first: undone, the
call is answered "undone" (audited ``undone``, the model told) and never runs; else it
runs as any approved call (audited ``ran``). The wait is workflow state and a timer, so
a worker lost meanwhile loses nothing: the next one replays to the same wait and the
call runs once. Ending the conversation undoes what still waits.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from parley.contracts import ScheduledCall, ToolCall, ToolResult, UndoInput, UndoResult
from parley.contracts.errors import InvalidDecision
from parley.contracts.names import CALL_SCHEDULED_EVENT, CALL_UNDONE_EVENT
from parley.workflows.context import Records, View

#: Before this patch no rule had an undo window: an approved call ran at once.
UNDO_WINDOW = "undo-window"


class UndoWindow:
    def __init__(self, view: View, records: Records) -> None:
        self._state, self._ledger, self._events = view.state, records.ledger, records.events

    def schedule(self, calls: list[tuple[ToolCall, int]], approved_by: str) -> None:
        """Each approved call with a window (and its seconds) waits from now."""
        if not calls or not workflow.patched(UNDO_WINDOW):
            return
        now = workflow.now()
        for call, seconds in calls:
            runs_at = now + timedelta(seconds=seconds)
            self._state.scheduled.append(
                ScheduledCall(
                    tool_call_id=call.tool_call_id,
                    name=call.name,
                    runs_at=runs_at,
                    approved_by=approved_by,
                )
            )
            self._events.custom(
                CALL_SCHEDULED_EVENT,
                {
                    "tool_call_id": call.tool_call_id,
                    "name": call.name,
                    "runs_at": runs_at.isoformat(),
                    "approved_by": approved_by,
                },
            )

    async def wait_out(self, call: ToolCall) -> bool:
        """Until the call's window ends, or someone undoes it: True when it may run.
        An undone call is answered here (the model is told), never run."""
        entry = next(
            (s for s in self._state.scheduled if s.tool_call_id == call.tool_call_id), None
        )
        if entry is None:
            return True  # no window (or a history from before UNDO_WINDOW)
        detail = {"runs_at": entry.runs_at.isoformat()}  # after its ``decided``
        self._ledger.audit("scheduled", entry.approved_by, call.tool_call_id, call.name, detail)
        remaining = entry.runs_at - workflow.now()
        if entry.undone_by is None and remaining > timedelta(0):
            try:
                await workflow.wait_condition(
                    lambda: entry.undone_by is not None, timeout=remaining
                )
            except TimeoutError:
                pass
        self._state.scheduled = [s for s in self._state.scheduled if s is not entry]
        if entry.undone_by is None:
            return True
        content = (
            f"{entry.undone_by} undid this call to {call.name} within its undo window; it "
            "did not run. Do not retry it unless the user asks you to."
        )
        payload = {"decision": "undo", "by": entry.undone_by}
        result = ToolResult(status="rejected", content=content, payload=payload)
        self._ledger.answer(call, result, "undone", actor=entry.undone_by)
        return False

    def check(self, request: UndoInput) -> None:
        """The ``undo`` update's validator: each named call waits in its window, and the
        sender approved it or owns the conversation."""
        waiting = {s.tool_call_id: s for s in self._state.scheduled if s.undone_by is None}
        if not request.tool_call_ids:
            if not any(self._may_undo(s, request.user_id) for s in waiting.values()):
                raise InvalidDecision(
                    "nothing to undo: no call you approved (or of your conversation) waits "
                    "in its undo window"
                )
            return
        for tool_call_id in request.tool_call_ids:
            entry = waiting.get(tool_call_id)
            if entry is None:
                raise InvalidDecision(
                    f"{tool_call_id} is not in an undo window: it ran, was undone, or was "
                    "never approved with one"
                )
            if not self._may_undo(entry, request.user_id):
                raise InvalidDecision(
                    f"only {entry.approved_by} (who approved it) or the conversation's owner "
                    f"may undo {tool_call_id}"
                )

    def undo(self, request: UndoInput, *, every: bool = False) -> UndoResult:
        """Take back the named calls (none named: all the sender may undo; ``every``: all,
        the conversation ends): the waits end and none of them runs."""
        undone = []
        for entry in self._state.scheduled:
            if entry.undone_by is not None:
                continue
            if request.tool_call_ids and entry.tool_call_id not in request.tool_call_ids:
                continue
            if not every and not self._may_undo(entry, request.user_id):
                continue
            entry.undone_by = request.user_id
            undone.append(entry.tool_call_id)
            self._events.custom(
                CALL_UNDONE_EVENT,
                {"tool_call_id": entry.tool_call_id, "name": entry.name, "by": request.user_id},
            )
        return UndoResult(undone=undone)

    def _may_undo(self, entry: ScheduledCall, user_id: str) -> bool:
        return user_id in (entry.approved_by, self._state.user_id)
