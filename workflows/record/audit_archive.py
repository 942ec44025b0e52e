"""The audit log loses nothing: the oldest kept entries go to the audit archive before
they leave the window. Workflow side (deterministic; the store is written by the
``archive_audit`` activity, ``activities/audit_archive.py``).

The window keeps the latest ``KEPT_AUDIT_ENTRIES``. Once ``ARCHIVE_BATCH`` more have
gathered beyond them, the run loop (between turns) stores those in one segment and the
window drops them: one activity, three events, per ``ARCHIVE_BATCH`` entries. An entry
leaves the window only once archived (``AuditWindow.keep_latest_archived``), so a store
that is down only makes the window wait for the next batch; past ``AUDIT_WINDOW_CAP``
(a run whose history predates the archive, which this build replays without it) the
oldest go regardless, as before. ``parley.client.audit`` reads the archive, then the window.
The archiver reads the window; the ledger, which writes the audit log, records each
archive (``Ledger.archived``).
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        ARCHIVE_AUDIT,
        KEPT_AUDIT_ENTRIES,
        ArchiveAuditInput,
        AuditArchiveRef,
    )
    from parley.contracts.activity_config import ARCHIVE_AUDIT_ACTIVITY
    from parley.contracts.state import AuditWindow

#: Entries archived at once (one activity each time).
ARCHIVE_BATCH = 250
#: The window's bound when archiving cannot happen.
AUDIT_WINDOW_CAP = KEPT_AUDIT_ENTRIES + 4 * ARCHIVE_BATCH
#: Runs whose history predates the archive replay without its activity.
ARCHIVE_AUDIT_PATCH = "archive-audit"


class AuditArchiver:
    def __init__(self, audit: AuditWindow, archived: Callable[[AuditArchiveRef], None]) -> None:
        self._audit, self._archived = audit, archived  # read; ``archived`` records it
        #: No archive in this run: its history began before there was one.
        self._off = False
        #: The store failed: the window's size at which to try again (the next batch).
        self._retry_at: int | None = None

    def due(self) -> bool:
        audit = self._audit
        if self._off or (self._retry_at is not None and len(audit.entries) < self._retry_at):
            return False
        return len(audit.to_archive(KEPT_AUDIT_ENTRIES)) >= ARCHIVE_BATCH

    async def archive(self) -> None:
        """Store the entries beyond the kept window, then let them go."""
        audit = self._audit
        if not workflow.patched(ARCHIVE_AUDIT_PATCH):
            self._off = True  # the cap trims the window, as before
            return
        entries = audit.to_archive(KEPT_AUDIT_ENTRIES)
        first = audit.archived_until()
        request = ArchiveAuditInput(
            parent=audit.archive if audit.archive_meets_window() else None,
            first=first,
            entries=entries,
        )
        try:
            archive: AuditArchiveRef = await workflow.execute_activity(
                ARCHIVE_AUDIT,
                request,
                result_type=AuditArchiveRef,
                **ARCHIVE_AUDIT_ACTIVITY.options(
                    summary=f"archive audit entries {first}-{first + len(entries) - 1}"
                ),
            )
        except ActivityError as err:
            workflow.logger.warning("the audit archive could not be written: %s", err.cause)
            self._retry_at = len(audit.entries) + ARCHIVE_BATCH
            return
        self._retry_at = None
        self._archived(archive)
