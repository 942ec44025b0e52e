"""The undo window: the one writer of ``state.scheduled``. Workflow side (deterministic:
a durable timer per decision, ``workflow.now()``).

A call whose rule says ``undo_seconds`` does not run when it is approved: the decision
schedules it (all of its calls at once, so their windows overlap), announced to
followers (``parley.call_scheduled``) and audited ``scheduled`` (after its ``decided``)
with the instant it runs. The turn then waits, for each call in turn, until its
instant or an ``undo`` by an approver (any of a quorum's) or the owner, whichever comes
first: undone, the call is answered "undone" (audited ``undone``, the model told) and
never runs; else it runs as any approved call (audited ``ran``). A call a remembered
approval lets run waits out its rule's window the same way, as approved by the one who
remembered it. The wait is workflow state and a timer, so a worker lost meanwhile
loses nothing: the next one replays to the same wait and the
call runs once. Ending the conversation undoes what still waits.

A subagent's calls wait in its own conversation. It tells its parent the list each
time it changes (``subagent_window``), and the parent lists them as its own, marked
with the subagent: an undo sent to the parent is passed on (``undo_signal``), and the
parent answers once the subagent has said which of them it undid (the others ran).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import timedelta

from temporalio import workflow

from parley.contracts import (
    ConversationState,
    ScheduledCall,
    SubagentRef,
    ToolCall,
    ToolResult,
    UndoInput,
    UndoResult,
    workflow_id_for,
)
from parley.contracts.errors import InvalidDecision
from parley.contracts.names import CALL_SCHEDULED_EVENT, CALL_UNDONE_EVENT, UNDO_SIGNAL
from parley.contracts.names import SUBAGENT_WINDOW_SIGNAL as WINDOW_SIGNAL
from parley.contracts.undo import SubagentWindow
from parley.workflows.context import Records, View

#: Before this patch no rule had an undo window: an approved call ran at once.
UNDO_WINDOW = "undo-window"
#: Before this patch a subagent told its parent nothing of its undo windows, and an
#: undo sent to the parent never reached them.
SUBAGENT_UNDO = "subagent-undo"
#: Before this patch a subagent told its parent nothing of a call an undo named that it
#: did not hold in a window; the parent's undo then waited for it.
UNDO_ANSWERED = "subagent-undo-answered"
#: Before this patch a call a remembered approval let run (a proposal, or an edit into
#: a remembered shape) ran at once, even when its rule gave approved calls a window.
REMEMBERED_UNDO = "remembered-undo-window"


def drop_subagent_windows(state: ConversationState, tool_call_id: str | None = None) -> None:
    """The parent's list forgets the calls of the subagent started by ``tool_call_id``
    (None: of every subagent): it ended or was stopped, and none of them runs."""
    state.scheduled = [
        s
        for s in state.scheduled
        if s.subagent is None or tool_call_id not in (None, s.subagent.tool_call_id)
    ]


class UndoWindow:
    def __init__(self, view: View, records: Records) -> None:
        self._state, self._ledger, self._events = view.state, records.ledger, records.events
        self._task = view.start.subagent
        #: In a parent: the subagents' calls that left their window (ran or undone), and
        #: those undone. Signals may arrive out of order: a call that left never returns.
        self._left: set[str] = set()
        self._undone: set[str] = set()

    def schedule(
        self,
        calls: list[tuple[ToolCall, int]],
        approved_by: str,
        approvers: dict[str, list[str]] | None = None,
    ) -> None:
        """Each approved call with a window (and its seconds) waits from now;
        ``approvers``: by call, a quorum's earlier approvers (each may undo it too)."""
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
                    approvers=(approvers or {}).get(call.tool_call_id, []),
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
        self._tell_parent()

    async def wait_out(self, call: ToolCall) -> bool:
        """Until the call's window ends, or someone undoes it: True when it may run.
        An undone call is answered here (the model is told), never run."""
        entry = next((s for s in self._own() if s.tool_call_id == call.tool_call_id), None)
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
        undone = [] if entry.undone_by is None else [call.tool_call_id]
        self._tell_parent(left=[call.tool_call_id], undone=undone)
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
        waiting = {s.tool_call_id: s for s in self._listed() if s.undone_by is None}
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
                who = ", ".join([*entry.approvers, entry.approved_by])
                raise InvalidDecision(
                    f"only {who} (who approved it) or the conversation's owner may undo "
                    f"{tool_call_id}"
                )

    def undo(self, request: UndoInput, *, every: bool = False) -> UndoResult:
        """Take back the named calls (none named: all the sender may undo; ``every``: all,
        the conversation ends): the waits end and none of them runs."""
        undone = []
        for entry in self._own():
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

    async def take_back(self, request: UndoInput) -> UndoResult:
        """The ``undo`` update: this conversation's calls are undone at once; a
        subagent's are passed on to its conversation, and the answer names those it
        undid (one that ran meanwhile is not named; none undone at all is refused)."""
        own = self.undo(request).undone
        passed: dict[str, list[ScheduledCall]] = {}
        for entry in self._listed():
            if entry.subagent is None or entry.undone_by is not None:
                continue
            if request.tool_call_ids and entry.tool_call_id not in request.tool_call_ids:
                continue
            if self._may_undo(entry, request.user_id):
                passed.setdefault(entry.subagent.session_id, []).append(entry)
        if not passed or not workflow.patched(SUBAGENT_UNDO):
            return UndoResult(undone=own)
        ids = [entry.tool_call_id for entries in passed.values() for entry in entries]
        for session_id, entries in passed.items():
            child = workflow.get_external_workflow_handle(
                workflow_id_for(session_id, subagent=True)
            )
            given = [entry.tool_call_id for entry in entries]
            try:
                await child.signal(UNDO_SIGNAL, request.model_copy(update={"tool_call_ids": given}))
            except Exception as err:  # it ended meanwhile: nothing of it runs now
                workflow.logger.info("could not pass an undo on to a subagent: %s", err)
        await workflow.wait_condition(lambda: all(self._settled(i) for i in ids))
        undone = [*own, *(i for i in ids if self._undone_in_subagent(i))]
        if not undone:
            raise InvalidDecision(
                f"nothing was undone: {', '.join(ids)} left the subagent's undo window "
                "before the undo reached it (it ran)"
            )
        return UndoResult(undone=undone)

    def mirror(self, window: SubagentWindow) -> None:
        """In a parent: a subagent's list of calls in their window (``subagent_window``),
        listed here with the subagent marked; one from a subagent no longer at work is
        dropped."""
        delegation = next(
            (d for d in self._state.delegations.active if d.tool_call_id == window.tool_call_id),
            None,
        )
        if delegation is None:
            return
        ref = SubagentRef(
            name=delegation.name,
            session_id=delegation.session_id,
            tool_call_id=delegation.tool_call_id,
        )
        self._left.update(window.left)
        self._undone.update(window.undone)
        listed = {s.tool_call_id: s for s in self._state.scheduled if s.subagent is not None}
        for entry in window.scheduled:
            mine = listed.get(entry.tool_call_id)
            if entry.tool_call_id in self._left:
                continue
            if mine is None:
                self._state.scheduled.append(entry.model_copy(update={"subagent": ref}))
                value = {"tool_call_id": entry.tool_call_id, "name": entry.name}
                value |= {"runs_at": entry.runs_at.isoformat(), "approved_by": entry.approved_by}
                self._events.custom(CALL_SCHEDULED_EVENT, {**value, "subagent": ref.session_id})
            elif entry.undone_by is not None and mine.undone_by is None:
                mine.undone_by = entry.undone_by
                self._events.custom(
                    CALL_UNDONE_EVENT,
                    {"tool_call_id": entry.tool_call_id, "name": entry.name, "by": entry.undone_by},
                )
        self._state.scheduled = [
            s
            for s in self._state.scheduled
            if s.subagent is None or s.tool_call_id not in self._left
        ]

    def undo_passed_on(self, request: UndoInput) -> None:
        """In a subagent: an undo its parent passed on (``undo_signal``; the parent
        checked it). The calls still in their window that the sender may undo are
        undone, and the parent is told; the others ran or are running. A call named that
        is not in a window here at all (it left, or the parent's list had it from a
        window that was not this subagent's) is told as left, so the parent's undo
        answers instead of waiting for it."""
        if self._task is None:
            return
        undone = self.undo(request).undone
        held = {s.tool_call_id for s in self._own()}
        absent = [i for i in request.tool_call_ids if i not in held]
        if absent and workflow.patched(UNDO_ANSWERED):
            self._tell_parent(left=absent)
        elif undone:
            self._tell_parent()

    def _tell_parent(self, left: Iterable[str] = (), undone: Iterable[str] = ()) -> None:
        """In a subagent: its parent is told the calls in their window now (and those
        that just left it), by a signal of its own that the turn does not wait for."""
        task = self._task
        if task is None or not workflow.patched(SUBAGENT_UNDO):
            return
        window = SubagentWindow(
            tool_call_id=task.tool_call_id,
            scheduled=[s.model_copy() for s in self._own()],
            left=list(left),
            undone=list(undone),
        )
        parent = workflow.get_external_workflow_handle(task.parent_workflow_id)

        async def send() -> None:
            try:
                await parent.signal(WINDOW_SIGNAL, window)
            except Exception as err:  # the parent ended: nobody to tell
                workflow.logger.info("could not tell the parent of an undo window: %s", err)

        asyncio.get_running_loop().create_task(send())

    def _settled(self, tool_call_id: str) -> bool:
        """In a parent: the subagent has said what became of a call passed an undo."""
        entry = next((s for s in self._listed() if s.tool_call_id == tool_call_id), None)
        return entry is None or entry.undone_by is not None

    def _undone_in_subagent(self, tool_call_id: str) -> bool:
        if tool_call_id in self._undone:
            return True
        entry = next((s for s in self._listed() if s.tool_call_id == tool_call_id), None)
        return entry is not None and entry.undone_by is not None

    def _own(self) -> list[ScheduledCall]:
        """This conversation's own calls in their window (not its subagents')."""
        return [s for s in self._state.scheduled if s.subagent is None]

    def _listed(self) -> list[ScheduledCall]:
        """Every call listed in a window here: its own, and its subagents' still there."""
        return [
            s
            for s in self._state.scheduled
            if s.subagent is None or s.tool_call_id not in self._left
        ]

    def _may_undo(self, entry: ScheduledCall, user_id: str) -> bool:
        return user_id in (entry.approved_by, self._state.user_id, *entry.approvers)
