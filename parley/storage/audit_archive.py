"""The audit archive: audit entries older than a conversation's kept window, as a chain
of immutable segments in the payload store, each pointing at the one before it.

Outside the workflow sandbox: the worker's ``archive_audit`` activity appends to it, and
``parley.client.audit`` (``parley audit``, the gateway's audit endpoint) reads it back, so an
export holds every entry however long the conversation. The workflow only ever sees the
small ``AuditArchiveRef``. A segment is stored under its conversation's workflow id, so
retention (``parley.storage.retention``) keeps it exactly as long as the transcript.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio.converter import (
    StorageDriver,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from parley.contracts import AuditArchiveRef, AuditEntry, PayloadConverter
from parley.storage.transcripts import read_stored


class AuditSegment(BaseModel):
    """Entries ``first`` on, stored after ``parent``."""

    parent: AuditArchiveRef | None = None
    first: int
    entries: list[AuditEntry] = Field(default_factory=list)


class AuditArchive:
    def __init__(self, driver: StorageDriver) -> None:
        self._driver = driver
        self._converter = PayloadConverter()

    async def append(
        self,
        parent: AuditArchiveRef | None,
        first: int,
        entries: list[AuditEntry],
        *,
        workflow_id: str,
        namespace: str,
    ) -> AuditArchiveRef:
        """Store ``entries`` (entry ``first`` first) after ``parent``; the new head."""
        if parent is not None and parent.end != first:
            raise ValueError(
                f"entries from {first} cannot follow an archive ending at {parent.end}"
            )
        segment = AuditSegment(parent=parent, first=first, entries=entries)
        payload = self._converter.to_payloads([segment])[0]
        context = StorageDriverStoreContext(
            target=StorageDriverWorkflowInfo(namespace=namespace, id=workflow_id)
        )
        [claim] = await self._driver.store(context, [payload])
        start = parent.first if parent is not None else first
        return AuditArchiveRef(
            claim=dict(claim.claim_data), first=start, length=first + len(entries) - start
        )

    async def load(self, ref: AuditArchiveRef) -> list[AuditEntry]:
        """Every entry the archive holds, oldest first (entry ``ref.first`` first)."""
        segments: list[AuditSegment] = []
        cursor: AuditArchiveRef | None = ref
        while cursor is not None:
            segments.append(await self._read(cursor))
            cursor = segments[-1].parent
        entries = [entry for segment in reversed(segments) for entry in segment.entries]
        if len(entries) != ref.length:
            raise ValueError(
                f"the audit archive holds {len(entries)} entries where its reference says "
                f"{ref.length}"
            )
        return entries

    async def _read(self, ref: AuditArchiveRef) -> AuditSegment:
        return await read_stored(self._driver, ref.claim, AuditSegment, "audit archive segment")
