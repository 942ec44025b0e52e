"""What a reader asks of a conversation and gets back: the ``state`` query's page, the
event log's pages and the ``wait_for_events`` update. Both sides import this module; no
I/O."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from parley.contracts.conversation import StrictInput
from parley.contracts.payloads import Contract


class EventsWait(StrictInput):
    """``wait_for_events``: return once the event log has an event after ``after``."""

    user_id: str
    after: int = -1
    #: The reader's verified groups, as on ``DecideInput`` (a member of a reviewer
    #: ``group:<name>`` reads the conversation). Empty (left out): none.
    groups: list[str] = Field(default_factory=list, max_length=64)


class StateQuery(StrictInput):
    user_id: str
    #: The first message of the page (absolute); None: the page that ends with the latest.
    transcript_offset: int | None = None
    transcript_limit: int = Field(default=200, ge=0, le=1_000)
    audit_offset: int | None = None
    audit_limit: int = Field(default=200, ge=0, le=1_000)
    #: The reader's verified groups, as on ``EventsWait``.
    groups: list[str] = Field(default_factory=list, max_length=64)


class EventsQuery(StrictInput):
    user_id: str
    after: int = -1
    limit: int = Field(default=500, ge=1, le=5_000)
    #: The reader's verified groups, as on ``EventsWait``.
    groups: list[str] = Field(default_factory=list, max_length=64)


class OffsetEvent(Contract):
    """One AG-UI event (a JSON object) and its offset in the conversation's event log."""

    offset: int
    event: dict[str, Any]


class EventPage(Contract):
    """Events with offset > ``after``; pass ``next_after`` as ``after`` to read on.
    ``first_kept`` is the oldest offset still held: a reader behind it missed events."""

    events: list[OffsetEvent]
    next_after: int
    first_kept: int = 0
    #: The offset of the conversation's latest event (-1: none yet).
    latest: int = -1
