"""What a conversation stored in the payload store, as a client reads it back, and the one
line a reader gets when retention has deleted it. Client side (never imported by
workflows).

Retention (``parley store gc``, or the workers' Schedule) deletes what a conversation
stored once it has been closed longer than the retention period, and leaves a record of
when (``parley.storage.base.Collected``). A read that then finds the content gone (an
older page of the transcript, the messages a fork or a rewind copies, the audit archive,
or the state itself when its history refers to payloads that went) is refused with
``DeletedByRetention``, saying what went and when (the gateway answers 410 Gone). With no
record, the store's own words stand (``StoreUnreadable``, or the caller's type).
"""

from __future__ import annotations

from datetime import UTC, timedelta

from langchain_core.messages import AnyMessage
from temporalio.client import Client

from parley.client.errors import ConversationRefused, checked_workflow_id
from parley.contracts import ContextRef
from parley.contracts.errors import ErrorType
from parley.storage import TranscriptStore, driver_of
from parley.storage.base import Collected, Referrer, collected_record
from parley.storage.transcripts import StoredObjectUnreadable


async def retention_record(temporal: Client, session_id: str) -> Collected | None:
    """Retention's record of collecting what conversation ``session_id`` stored."""
    referrer = Referrer(temporal.namespace, checked_workflow_id(session_id))
    return await collected_record(driver_of(temporal.data_converter), referrer)


async def stored_messages(
    temporal: Client, session_id: str, ref: ContextRef, kept: int, then: str
) -> list[AnyMessage]:
    """The messages of the conversation's transcript chain up to ``ref`` (the workflow
    keeps those from message ``kept`` on); gone, refused saying when, and ``then``."""
    try:
        return await TranscriptStore(driver_of(temporal.data_converter)).load(ref)
    except ValueError as problem:
        raise await unreadable_stored(
            temporal,
            session_id,
            problem,
            f"the messages of conversation {session_id} before message {kept}",
            then,
        ) from None


async def state_deleted(temporal: Client, session_id: str) -> ConversationRefused | None:
    """For a closed conversation whose state query failed: the refusal when retention
    deleted what it stored (its history refers to those payloads, so no replay of it
    reads its state any more), else None."""
    if (record := await retention_record(temporal, session_id)) is None:
        return None
    return deleted(
        f"the messages and payloads conversation {session_id} stored",
        record,
        "its state can no longer be read (a worker rebuilds it from its history, which "
        "refers to them)",
    )


async def unreadable_stored(
    temporal: Client,
    session_id: str,
    problem: ValueError,
    gone: str,
    then: str,
    error_type: str = ErrorType.STORE_UNREADABLE,
) -> ConversationRefused:
    """The refusal of a read that could not get ``problem``'s stored object: deleted by
    retention (``gone`` "were deleted by retention on ...; " ``then``), or else the
    store's own words, as ``error_type``."""
    if isinstance(problem, StoredObjectUnreadable):
        if (record := await retention_record(temporal, session_id)) is not None:
            return deleted(gone, record, then)
    return ConversationRefused(str(problem), error_type)


def deleted(gone: str, record: Collected, then: str) -> ConversationRefused:
    """``gone`` (a plural subject: "the messages of S before message N") were deleted
    by retention, when; ``then``: what the reader can still do."""
    when = record.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return ConversationRefused(
        f"{gone} were deleted by retention on {when} (`parley store gc`: what a conversation "
        f"stored goes {_duration(record.retention)} after it closes); {then}",
        ErrorType.DELETED_BY_RETENTION,
    )


def _duration(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g} day(s)"
    return f"{seconds:g} s"
