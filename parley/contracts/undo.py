"""Taking a call back: the ``undo`` update (an approved call that waits out its undo
window, its rule's ``undo_seconds``; ``ScheduledCall``) and the ``revert`` update (a call
that ran, by its tool's declared inverse: ``inverse_call`` finds it on a worker, and it
is proposed through the gate like any call). Both sides import this module; no I/O."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from parley.contracts.conversation import ScheduledCall, StrictInput
from parley.contracts.payloads import Contract
from parley.contracts.previews import InverseCall

#: Finds a call's inverse on a worker (``activities.previews``).
INVERSE_CALL = "parley.inverse_call"


#: The most calls one ``undo`` names.
MAX_UNDO_CALLS = 64


class UndoInput(StrictInput):
    """The ``undo`` update: take back approved calls still in their undo window."""

    user_id: str
    #: The calls to undo; empty: every call in its window that ``user_id`` may undo.
    tool_call_ids: list[str] = Field(default_factory=list, max_length=MAX_UNDO_CALLS)
    #: The sender's verified groups, as on ``EventsWait`` (a member reads and undoes).
    groups: list[str] = Field(default_factory=list, max_length=64)


class SubagentWindow(Contract):
    """The ``subagent_window`` signal: a subagent's calls in their undo window, told to
    its parent each time the list changes, so that the parent lists them and passes an
    undo of them on (``undo_signal``, an ``UndoInput``)."""

    #: The parent's call that handed the subagent its task.
    tool_call_id: str
    #: The calls that wait in their window now (``undone_by`` set: undone, not yet
    #: answered).
    scheduled: list[ScheduledCall] = Field(default_factory=list)
    #: The calls that left their window since the last signal: they ran or were undone.
    left: list[str] = Field(default_factory=list)
    #: Of ``left``, the ones that were undone (and never ran).
    undone: list[str] = Field(default_factory=list)


class UndoResult(Contract):
    """The calls the ``undo`` took back: none of them runs, and the model is told."""

    undone: list[str]


class RevertInput(StrictInput):
    """The ``revert`` update: propose the inverse of a call that ran."""

    user_id: str
    tool_call_id: str
    #: The sender's verified groups, as on ``UndoInput``.
    groups: list[str] = Field(default_factory=list, max_length=64)


class InverseCallInput(Contract):
    """``inverse_call``: a call that ran (its canonical arguments and its result's
    payload), whose inverse the worker's registry computes."""

    name: str
    args: dict[str, Any]
    payload: Any = None
    subagent: str | None = None


class InverseAnswer(Contract):
    """The inverse of a call (``inverse``, its arguments canonical), or why there is none."""

    inverse: InverseCall | None = None
    reason: str | None = None
