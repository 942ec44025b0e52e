"""The payload store's garbage collection as an activity: ``workflows/store_gc.py``
runs it on the worker's Schedule. Side effects: it lists and deletes stored objects
(``parley.storage.retention``), asking Temporal through the worker's own client which
conversations still need them.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from parley.contracts import COLLECT_STORE_GARBAGE, CollectGarbageInput, StoreGcReport
from parley.contracts.names import COLLECT_STORE_GARBAGE_UNNAMESPACED
from parley.storage.base import PayloadStore
from parley.storage.retention import collect_garbage


class StoreGcActivities:
    """Collects ``store``'s garbage; ``retention_seconds`` None: the namespace's."""

    def __init__(self, store: PayloadStore, retention_seconds: float | None) -> None:
        self._store = store
        self._retention = (
            timedelta(seconds=retention_seconds) if retention_seconds is not None else None
        )

    @activity.defn(name=COLLECT_STORE_GARBAGE)
    async def collect_store_garbage(self, request: CollectGarbageInput) -> StoreGcReport:
        report = await collect_garbage(
            self._store,
            activity.client(),
            now=request.now,
            retention=self._retention,
            dry_run=request.dry_run,
        )
        activity.logger.info(
            "payload store: %s %d object(s), %d bytes, of %d conversation(s)",
            "would delete" if report.dry_run else "deleted",
            len(report.deleted),
            report.deleted_bytes,
            len(report.conversations),
        )
        return StoreGcReport.model_validate(report.summary())

    @activity.defn(name=COLLECT_STORE_GARBAGE_UNNAMESPACED)
    async def collect_store_garbage_unnamespaced(
        self, request: CollectGarbageInput
    ) -> StoreGcReport:
        """The same collection under its name from before activity names were
        namespaced (``collect_store_garbage``), registered too for now: a sweep that a
        worker of an earlier build scheduled under that name still completes (its
        workflow replays with the old name, ``workflows/store_gc.py``). Remove once
        every worker runs this build and no such sweep is left (one sweep lasts at most
        ``STORE_GC_ACTIVITY``'s hour per attempt, three attempts)."""
        return await self.collect_store_garbage(request)
