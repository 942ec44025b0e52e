"""The store's garbage collection workflow: typed input and report that read the plain
dicts of before, its activity under the namespaced name with the shared options and a
summary, and a sweep of an earlier build (the unnamespaced activity name, dict input)
that still completes and replays. A real dev server and a real local store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.converter import StorageDriverStoreContext, StorageDriverWorkflowInfo
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from parley.activities.models import build_chat_model
from parley.activities.store_gc import StoreGcActivities
from parley.config.settings import Settings
from parley.contracts import (
    COLLECT_STORE_GARBAGE,
    STORE_GC_ACTIVITY,
    STORE_GC_WORKFLOW,
    StoreGcInput,
    StoreGcReport,
)
from parley.contracts.names import COLLECT_STORE_GARBAGE_UNNAMESPACED
from parley.storage import LocalFileStorageDriver, data_converter, driver_of
from parley.storage.base import StoredObject, Tally
from parley.storage.retention import GcReport
from parley.tools import ToolRegistry
from parley.worker.wiring import build_worker
from parley.workflows.store_gc import StoreGcWorkflow
from tests.support.transcripts import new_session


@workflow.defn(name=STORE_GC_WORKFLOW, sandboxed=False)
class EarlierStoreGcWorkflow:
    """The sweep as a build before typed contracts ran it: dict input and report, the
    activity unnamespaced, its options inline."""

    @workflow.run
    async def run(self, request: dict[str, Any] | None = None) -> dict[str, Any]:
        dry_run = bool((request or {}).get("dry_run", False))
        return await workflow.execute_activity(
            COLLECT_STORE_GARBAGE_UNNAMESPACED,
            {"now": workflow.now().isoformat(), "dry_run": dry_run},
            result_type=dict,
            start_to_close_timeout=timedelta(hours=1),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=10),
                maximum_interval=timedelta(minutes=5),
                maximum_attempts=3,
            ),
        )


@asynccontextmanager
async def store_client(env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Client]:
    """A client whose converter writes to a fresh local store holding one object, stored
    just now by a conversation Temporal does not know (so kept)."""
    store = LocalFileStorageDriver(tmp_path / "store")
    target = StorageDriverWorkflowInfo(namespace="default", id=f"conversation-{new_session()}")
    await store.store(StorageDriverStoreContext(target=target), [Payload(data=b"kept")])
    yield await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=data_converter(driver=store),
    )


def scheduled_activities(history: Any, client: Client) -> list[tuple[str, str]]:
    """Each scheduled activity's type and summary (``-``: none)."""
    found = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        summary = "-"
        if event.user_metadata.HasField("summary"):
            summary = client.data_converter.payload_converter.from_payload(
                event.user_metadata.summary, str
            )
        found.append((event.activity_task_scheduled_event_attributes.activity_type.name, summary))
    return found


async def replays(client: Client, handle: WorkflowHandle) -> bool:
    replayer = Replayer(workflows=[StoreGcWorkflow], data_converter=client.data_converter)
    result = await replayer.replay_workflow(await handle.fetch_history())
    return result.replay_failure is None


async def test_a_sweep_runs_the_namespaced_activity_and_reads_the_schedules_old_input(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"parley-gc-{uuid.uuid4().hex[:8]}"
    settings = Settings(task_queue=queue, store_retention_seconds=3600)
    async with store_client(temporal_env, tmp_path) as client:
        worker = build_worker(
            client, settings, registry=ToolRegistry([]), model=build_chat_model("scripted")
        )
        async with worker:
            # As a Schedule made by an earlier build starts it: a plain ``{}``.
            old = await client.start_workflow(
                STORE_GC_WORKFLOW,
                {},
                id=f"{queue}-old-input",
                task_queue=queue,
                result_type=StoreGcReport,
            )
            report = await old.result()
            assert (report.dry_run, report.kept_objects, report.deleted_objects) == (False, 1, 0)
            assert report.retention_seconds == 3600
            dry = await client.start_workflow(
                STORE_GC_WORKFLOW, StoreGcInput(dry_run=True), id=f"{queue}-dry", task_queue=queue
            )
            as_dict = await dry.result()  # a client that reads the report as JSON
            assert as_dict["dry_run"] is True and as_dict["deleted"] == []
            assert set(as_dict) == set(StoreGcReport.model_fields)
        history = await old.fetch_history()
        assert scheduled_activities(history, client) == [
            (COLLECT_STORE_GARBAGE, "collect store garbage")
        ]
        assert scheduled_activities(await dry.fetch_history(), client) == [
            (COLLECT_STORE_GARBAGE, "collect store garbage (dry run)")
        ]
        [scheduled] = [
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert scheduled.start_to_close_timeout.ToTimedelta() == STORE_GC_ACTIVITY.start_to_close
        assert scheduled.retry_policy.maximum_attempts == STORE_GC_ACTIVITY.retry.maximum_attempts
        assert await replays(client, old) and await replays(client, dry)


async def test_a_sweep_of_an_earlier_build_completes_here_and_replays(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The earlier build's workflow asks for ``collect_store_garbage``: this build's
    worker still serves that name, and its history replays on this build's workflow."""
    queue = f"parley-gc-{uuid.uuid4().hex[:8]}"
    async with store_client(temporal_env, tmp_path) as client:
        gc = StoreGcActivities(driver_of(client.data_converter), retention_seconds=3600)
        async with Worker(
            client,
            task_queue=queue,
            workflows=[EarlierStoreGcWorkflow],
            activities=[gc.collect_store_garbage, gc.collect_store_garbage_unnamespaced],
        ):
            earlier = await client.start_workflow(
                STORE_GC_WORKFLOW, {}, id=f"{queue}-earlier", task_queue=queue
            )
            report = await earlier.result()
        assert report["kept_objects"] == 1 and report["dry_run"] is False
        history = await earlier.fetch_history()
        assert scheduled_activities(history, client) == [(COLLECT_STORE_GARBAGE_UNNAMESPACED, "-")]
        assert await replays(client, earlier)


def test_the_report_reads_a_collections_dict_and_writes_the_same_keys() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    collected = GcReport(
        dry_run=False,
        retention=timedelta(days=30),
        now=now,
        deleted=[StoredObject("ab/cd", 7, now)],
        kept_objects=2,
        elsewhere=[Tally("c-x.default", 3, 30, "c-x", "default", "host:7233")],
    )
    summary = collected.summary()
    report = StoreGcReport.model_validate(summary)
    assert report.deleted[0].key == "ab/cd" and report.elsewhere[0].cluster_id == "c-x"
    assert report.retention_seconds == 30 * 86400 and report.now == now
    assert report.model_dump(mode="json").keys() == summary.keys()
    assert StoreGcInput.model_validate({}) == StoreGcInput(dry_run=False)
