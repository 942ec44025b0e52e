"""The ``undo`` update: take back an approved call that waits out its undo window (its
rule's ``undo_seconds``; ``ScheduledCall``). Both sides import this module; no I/O."""

from __future__ import annotations

from pydantic import Field

from parley.contracts.conversation import StrictInput
from parley.contracts.payloads import Contract


class UndoInput(StrictInput):
    """The ``undo`` update: take back approved calls still in their undo window."""

    user_id: str
    #: The calls to undo; empty: every call in its window that ``user_id`` may undo.
    tool_call_ids: list[str] = Field(default_factory=list, max_length=64)
    #: The sender's verified groups, as on ``EventsWait`` (a member reads and undoes).
    groups: list[str] = Field(default_factory=list, max_length=64)


class UndoResult(Contract):
    """The calls the ``undo`` took back: none of them runs, and the model is told."""

    undone: list[str]
