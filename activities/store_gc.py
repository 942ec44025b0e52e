"""The payload store's garbage collection as an activity: ``workflows/store_gc.py``
runs it on the worker's Schedule. Side effects: it lists and deletes stored objects
(``parley.storage.retention``), asking Temporal through the worker's own client which
conversations still need them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import activity

from parley.storage.base import PayloadStore
from parley.storage.retention import collect_garbage


class StoreGcActivities:
    """Collects ``store``'s garbage; ``retention_seconds`` None: the namespace's."""

    def __init__(self, store: PayloadStore, retention_seconds: float | None) -> None:
        self._store = store
        self._retention = (
            timedelta(seconds=retention_seconds) if retention_seconds is not None else None
        )

    @activity.defn(name="collect_store_garbage")
    async def collect_store_garbage(self, request: dict[str, Any]) -> dict[str, Any]:
        report = await collect_garbage(
            self._store,
            activity.client(),
            now=datetime.fromisoformat(request["now"]),
            retention=self._retention,
            dry_run=bool(request.get("dry_run", False)),
        )
        summary = report.summary()
        activity.logger.info(
            "payload store: %s %d object(s), %d bytes, of %d conversation(s)",
            "would delete" if report.dry_run else "deleted",
            len(report.deleted),
            report.deleted_bytes,
            len(report.conversations),
        )
        return summary
