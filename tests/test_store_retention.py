"""Retention of the payload store, the same on both stores: the local directory and S3
(``moto_server`` on 127.0.0.1), with real conversations on the dev server, a 1-second
retention and a test clock for "now". What a conversation closed past retention stored
goes; what one closed inside retention or one open for weeks stored stays and is read;
shared content stays while any referrer lives; ``--dry-run`` deletes nothing. The
worker's Temporal Schedule runs the same collection."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    StorageDriverRetrieveContext,
)
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import workflow_id_for
from parley.storage import LocalFileStorageDriver, PayloadStore, data_converter, driver_of
from parley.storage.base import Collected, Referrer
from parley.storage.retention import collect_garbage, store_stats
from parley.storage.schedule import ensure_gc_schedule
from parley.tools import ToolRegistry
from parley.worker.wiring import build_worker
from tests.support import call, script
from tests.support.s3 import S3Server
from tests.support.store_tools import stored_for, toolset
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

KB = 1024
SECOND = timedelta(seconds=1)
USER = "vic"


@pytest.fixture(params=["local", "s3"])
async def store_client(
    request: pytest.FixtureRequest, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> AsyncIterator[tuple[PayloadStore, Client]]:
    """A client whose converter writes to a fresh store of each kind."""
    if request.param == "local":
        converter = data_converter(driver=LocalFileStorageDriver(tmp_path / "store"))
    else:
        s3: S3Server = request.getfixturevalue("s3")
        bucket = s3.create_bucket(f"parley-{uuid.uuid4().hex[:10]}")
        converter = data_converter(s3.settings(bucket))
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        namespace=temporal_env.client.namespace,
        data_converter=converter,
    )
    store = driver_of(converter)
    assert isinstance(store, PayloadStore)
    await store.bind(client)  # S3: its cluster's and namespace's part, as a worker's start
    yield store, client
    await store.aclose()


def a_model():
    """Every conversation: read a 200 KB page (claim-checked), say so; then "again"."""
    return script(
        {"content": "", "tool_calls": [call("big_page", "p1", n=1, size=200 * KB)]},
        {"content": "read"},
        {"content": "again"},
    )


@asynccontextmanager
async def running_worker(client: Client, settings: Settings) -> AsyncIterator[Conversations]:
    """A fresh in-process worker: empty workflow cache, cold transcript cache."""
    worker = build_worker(client, settings, registry=ToolRegistry(toolset()), model=a_model())
    async with worker:
        yield Conversations(client, settings)


async def closed_at(conv: Conversations, sid: str) -> datetime:
    described = await conv.handle(sid).describe()
    assert described.close_time is not None
    return described.close_time


def referrers(objects: list) -> set[str]:
    return {r.workflow_id for o in objects for r in o.referrers}


async def test_closed_past_retention_goes_inside_retention_and_open_for_weeks_stay(
    store_client: tuple[PayloadStore, Client],
) -> None:
    store, client = store_client
    settings = Settings(task_queue=f"parley-gc-{uuid.uuid4().hex[:8]}")
    past, inside, open_ = new_session(), new_session(), new_session()
    async with running_worker(client, settings) as conv:
        for sid in (past, inside, open_):
            assert (await conv.send(sid, USER, "read the page")).reply == "read"
        await conv.end(past, USER)
        past_closed = await closed_at(conv, past)
        # Real time between the two closes, so that one can be past retention and the
        # other inside it at one "now".
        await eventually(lambda: datetime.now(UTC) > past_closed + 1.2 * SECOND, 10)
        await conv.end(inside, USER)
        inside_closed = await closed_at(conv, inside)

    wf = {sid: workflow_id_for(sid) for sid in (past, inside, open_)}
    # The same content stored by the closed conversation and the open one.
    shared = Payload(metadata={"encoding": b"binary/plain"}, data=b"s" * (200 * KB))
    [past_claim] = await store.store(stored_for(wf[past]), [shared])
    [open_claim] = await store.store(stored_for(wf[open_]), [shared])

    before = await store.inventory()
    assert referrers(before) == set(wf.values())
    now = inside_closed + 0.5 * SECOND  # past: > 1 s closed; inside: 0.5 s

    dry = await collect_garbage(store, client, now=now, retention=SECOND, dry_run=True)
    assert dry.conversations == [wf[past]] and dry.deleted
    assert sorted(o.key for o in await store.inventory()) == sorted(o.key for o in before)
    past_referrer = Referrer(client.namespace, wf[past])
    assert await store.collected(past_referrer) is None  # a dry run records nothing

    done = await collect_garbage(store, client, now=now, retention=SECOND)
    assert done.conversations == [wf[past]]
    # Retention's record of it, for readers that find it gone; none
    # for the conversations it kept, and none in the inventory.
    assert await store.collected(past_referrer) == Collected(at=now, retention=SECOND)
    assert await store.collected(Referrer(client.namespace, wf[inside])) is None
    assert sorted(o.key for o in done.deleted) == sorted(o.key for o in dry.deleted)
    after = await store.inventory()
    assert referrers(after) == {wf[inside], wf[open_]}
    assert len(after) == len(before) - len(done.deleted)
    # Shared content survives while a referrer lives: the open conversation's copy
    # (on S3 each conversation has its own; locally it is one object, now only its).
    assert await store.retrieve(StorageDriverRetrieveContext(), [open_claim]) == [shared]
    shared_by_past = [o.key for o in before if wf[past] in referrers([o]) and len(o.referrers) > 1]
    if isinstance(store, LocalFileStorageDriver):
        # One object for the same bytes: the page above (every conversation's tool
        # result is the same) and the payload stored twice; the past one's marks go.
        assert past_claim == open_claim and len(shared_by_past) >= 2
        assert set(shared_by_past) <= {o.key for o in after}
        assert done.released == len(shared_by_past)
    else:
        assert shared_by_past == []  # S3 keys name one conversation each

    async with running_worker(client, settings) as conv:
        shown = await conv.state(inside, USER)  # `show`, replayed by a cold worker
        assert shown.status == "ended"
        page = await conv.transcript(inside, USER, offset=0, limit=10)
        [page_result] = [m for m in page if isinstance(m, ToolMessage)]
        assert str(page_result.content).startswith("page 1: xxx")

        # Weeks later, the open conversation still is: its content stays (the one
        # closed inside retention is past it by then).
        weeks = await collect_garbage(
            store, client, now=datetime.now(UTC) + timedelta(weeks=3), retention=SECOND
        )
        assert weeks.conversations == [wf[inside]]
        assert referrers(await store.inventory()) == {wf[open_]}
        # Its next turn reads its whole transcript from the store (a cold worker): the
        # script answers by how many model replies it sees.
        turn = await conv.send(open_, USER, "read it again")
        assert turn.status == "completed" and turn.reply == "again", turn
        whole = await conv.transcript(open_, USER, offset=0, limit=100)
        assert [m.content for m in whole if isinstance(m, AIMessage) and m.content] == [
            "read",
            "again",
        ]
    assert await store.retrieve(StorageDriverRetrieveContext(), [open_claim]) == [shared]


async def test_the_worker_schedule_collects_with_the_retention_setting(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    store = LocalFileStorageDriver(tmp_path / "store")
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        namespace=temporal_env.client.namespace,
        data_converter=data_converter(driver=store),
    )
    queue = f"parley-gc-{uuid.uuid4().hex[:8]}"
    settings = Settings(task_queue=queue, store_retention_seconds=1, store_gc_every_seconds=3600)
    closed, open_ = new_session(), new_session()
    async with running_worker(client, settings) as conv:
        for sid in (closed, open_):
            assert (await conv.send(sid, USER, "read the page")).reply == "read"
        await conv.end(closed, USER)
        ended = await closed_at(conv, closed)
        await eventually(lambda: datetime.now(UTC) > ended + 1.2 * SECOND, 10)
        every = timedelta(seconds=settings.store_gc_every_seconds or 0)
        schedule_id = await ensure_gc_schedule(client, queue, every)
        assert await ensure_gc_schedule(client, queue, every) == schedule_id  # a 2nd worker
        schedule = client.get_schedule_handle(schedule_id)
        try:
            await schedule.trigger()

            async def collected() -> bool:
                return referrers(await store.inventory()) == {workflow_id_for(open_)}

            await eventually(collected, 30, "the scheduled collection")
            [action] = (await schedule.describe()).info.recent_actions
            run = client.get_workflow_handle(
                action.action.workflow_id, run_id=action.action.first_execution_run_id
            )
            report = await run.result()
            assert report["conversations"] == [workflow_id_for(closed)]
            assert report["dry_run"] is False and report["deleted_objects"] > 0
        finally:
            await schedule.delete()
    stats = await store_stats(store)
    assert stats.conversations == 1 and stats.objects > 0


@workflow.defn(name="RetentionTestChild")
class ChildWorkflow:
    @workflow.run
    async def run(self) -> str:
        return "reported"


@workflow.defn(name="RetentionTestParent")
class ParentWorkflow:
    """Starts a child (as a conversation starts a subagent) and stays open until told."""

    def __init__(self) -> None:
        self._done = False

    @workflow.run
    async def run(self, child_id: str) -> str:
        report = await workflow.execute_child_workflow(ChildWorkflow.run, id=child_id)
        await workflow.wait_condition(lambda: self._done)
        return report

    @workflow.signal
    def finish(self) -> None:
        self._done = True


async def test_a_closed_child_keeps_its_content_while_its_parent_is_open(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A subagent's conversation closes before its parent, whose history holds the
    child's result: the child's stored content stays as long as the parent is open."""
    store = LocalFileStorageDriver(tmp_path / "store")
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        namespace=temporal_env.client.namespace,
        data_converter=data_converter(driver=store),
    )
    queue = f"parley-gc-{uuid.uuid4().hex[:8]}"
    parent_id, child_id = f"parent-{uuid.uuid4().hex[:8]}", f"child-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ParentWorkflow, ChildWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        parent = await client.start_workflow(
            ParentWorkflow.run, child_id, id=parent_id, task_queue=queue
        )

        async def child_closed() -> bool:
            try:
                described = await client.get_workflow_handle(child_id).describe()
            except RPCError:  # not started yet
                return False
            return described.close_time is not None

        await eventually(child_closed, 30, "the child's close")
        [claim] = await store.store(stored_for(child_id), [Payload(data=b"child result")])
        weeks_later = datetime.now(UTC) + timedelta(weeks=3)
        kept = await collect_garbage(store, client, now=weeks_later, retention=SECOND)
        assert kept.deleted == [] and referrers(await store.inventory()) == {child_id}

        await parent.signal(ParentWorkflow.finish)
        assert await parent.result() == "reported"
    gone = await collect_garbage(store, client, now=weeks_later, retention=SECOND)
    assert gone.conversations == [child_id] and await store.inventory() == []
    with pytest.raises(FileNotFoundError):
        await store.retrieve(StorageDriverRetrieveContext(), [claim])
