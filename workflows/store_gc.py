"""The payload store's garbage collection as a workflow: what the worker's Temporal
Schedule (``PARLEY_STORE_GC_EVERY_SECONDS``) starts, so that one collection runs per
interval whichever host is up, never a cron on one machine.

Deterministic: it asks the ``collect_store_garbage`` activity (``activities/store_gc.py``)
to collect at the workflow's own time, and returns its report.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

#: The name the Schedule starts and the worker registers.
STORE_GC_WORKFLOW = "ParleyStoreGc"
COLLECT_ACTIVITY = "collect_store_garbage"


@workflow.defn(name=STORE_GC_WORKFLOW)
class StoreGcWorkflow:
    @workflow.run
    async def run(self, request: dict[str, Any] | None = None) -> dict[str, Any]:
        dry_run = bool((request or {}).get("dry_run", False))
        return await workflow.execute_activity(
            COLLECT_ACTIVITY,
            {"now": workflow.now().isoformat(), "dry_run": dry_run},
            result_type=dict,
            # A large store takes a while to list; a failed sweep is retried a few
            # times, then the next scheduled one tries again.
            start_to_close_timeout=timedelta(hours=1),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=10),
                maximum_interval=timedelta(minutes=5),
                maximum_attempts=3,
            ),
        )
