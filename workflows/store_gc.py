"""The payload store's garbage collection as a workflow: what the worker's Temporal
Schedule (``PARLEY_STORE_GC_EVERY_SECONDS``) starts, so that one collection runs per
interval whichever host is up, never a cron on one machine.

Deterministic: it asks the ``parley.collect_store_garbage`` activity
(``activities/store_gc.py``) to collect at the workflow's own time, and returns its
report. Its input, its activity's options and its report are contracts
(``parley.contracts``: ``StoreGcInput``, ``STORE_GC_ACTIVITY``, ``StoreGcReport``).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        COLLECT_STORE_GARBAGE,
        STORE_GC_ACTIVITY,
        STORE_GC_WORKFLOW,
        CollectGarbageInput,
        StoreGcInput,
        StoreGcReport,
    )
    from parley.contracts.names import COLLECT_STORE_GARBAGE_UNNAMESPACED

#: ``workflow.patched`` id: the activity is named ``parley.collect_store_garbage``;
#: a sweep recorded before asked for ``collect_store_garbage`` and replays so.
NAMESPACED_ACTIVITY_PATCH = "store-gc-namespaced-activity"


@workflow.defn(name=STORE_GC_WORKFLOW)
class StoreGcWorkflow:
    @workflow.run
    async def run(self, request: StoreGcInput | None = None) -> StoreGcReport:
        dry_run = request.dry_run if request is not None else False
        activity = (
            COLLECT_STORE_GARBAGE
            if workflow.patched(NAMESPACED_ACTIVITY_PATCH)
            else COLLECT_STORE_GARBAGE_UNNAMESPACED
        )
        return await workflow.execute_activity(
            activity,
            CollectGarbageInput(now=workflow.now(), dry_run=dry_run),
            result_type=StoreGcReport,
            **STORE_GC_ACTIVITY.options(
                summary="collect store garbage" + (" (dry run)" if dry_run else "")
            ),
        )
