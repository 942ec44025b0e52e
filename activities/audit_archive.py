"""The ``archive_audit`` activity: store a batch of a conversation's oldest kept audit
entries in its audit archive (``parley.storage.audit_archive``), so that the workflow's
window can let them go and nothing of the audit log is lost. Activity side.
"""

from __future__ import annotations

from temporalio import activity

from parley.contracts import ARCHIVE_AUDIT, ArchiveAuditInput, AuditArchiveRef
from parley.storage.audit_archive import AuditArchive


class AuditArchiveActivities:
    def __init__(self, archive: AuditArchive) -> None:
        self._archive = archive

    @activity.defn(name=ARCHIVE_AUDIT)
    async def archive_audit(self, request: ArchiveAuditInput) -> AuditArchiveRef:
        info = activity.info()
        return await self._archive.append(
            request.parent,
            request.first,
            request.entries,
            workflow_id=info.workflow_id,
            namespace=info.namespace,
        )
