"""The Temporal Schedule that collects the payload store's garbage
(``PARLEY_STORE_GC_EVERY_SECONDS``): created, or brought up to date, by every worker of
the task queue at start, so that it exists once per task queue however many workers run.

Outside the workflow sandbox (the worker). It names the workflow by its registered name
and starts it with its typed input (``parley.contracts``: ``STORE_GC_WORKFLOW``,
``StoreGcInput``); the toolkit imports no workflow code.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from parley.contracts import STORE_GC_WORKFLOW, StoreGcInput


def gc_schedule_id(task_queue: str) -> str:
    return f"parley-store-gc-{task_queue}"


async def ensure_gc_schedule(client: Client, task_queue: str, every: timedelta) -> str:
    """Make the task queue's collection Schedule run every ``every``; its id."""
    schedule_id = gc_schedule_id(task_queue)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            STORE_GC_WORKFLOW, StoreGcInput(), id=f"{schedule_id}-run", task_queue=task_queue
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        # One sweep at a time: a slow one makes the next wait, not pile up.
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await client.create_schedule(schedule_id, schedule)
    except ScheduleAlreadyRunningError:

        def update(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await client.get_schedule_handle(schedule_id).update(update)
    return schedule_id
