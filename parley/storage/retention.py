"""Retention of the payload store: what ``parley store gc`` and the worker's Schedule
delete, and what ``parley store stats`` counts. The same for both stores (through
``PayloadStore``).

Outside the workflow sandbox: the CLI runs it directly, the worker in an activity.

A collection (and a count) sees only its own cluster's and namespace's part of the store
(``parts``): other clusters' and namespaces' parts, and what was written before the
store kept parts (whose cluster cannot be told), are counted apart and never touched
(``GcReport.elsewhere``). ``legacy`` takes what was written before parts as this
cluster's, which is refused while another cluster has a part of the store.

In its part, an object is kept while any conversation that refers to it can still read
it:

- an open conversation (its workflow is running), or one closed less than the retention
  period ago (by default the namespace's retention: nothing outlives the history that
  refers to it); a subagent's conversation counts as open while its parent does (the
  parent's history holds the child's result);
- a conversation Temporal does not know (not started yet, or long gone) keeps what it
  stored for one retention period from when it stored it;
- an object no conversation claims (stored with no workflow) is never deleted.

Content shared between conversations (the local store keeps the same bytes once) goes
only when none of them keeps it; the others' marks are released as they expire.

A collection that deletes (or releases) what a conversation stored leaves a record of it
in the store (``PayloadStore.record_collected``: when, under which retention period),
so a reader that finds the conversation's messages gone can say so, and when.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from parley.storage.base import UNSPLIT, Collected, PayloadStore, Referrer, StoredObject, Tally
from parley.storage.clusters import slug
from parley.storage.parts import PartitionedStore

#: Conversations described at once while collecting.
DESCRIBE_CONCURRENCY = 16


class Standing(Enum):
    LIVE = "live"  # running, closed inside retention, or a child of a live conversation
    EXPIRED = "expired"  # closed longer than the retention period ago
    UNKNOWN = "unknown"  # Temporal has no such workflow (not yet, or no longer)


@dataclass
class GcReport:
    """What one collection deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool
    retention: timedelta
    now: datetime
    deleted: list[StoredObject] = field(default_factory=list)
    kept_objects: int = 0
    kept_bytes: int = 0
    #: Marks of expired conversations dropped from objects others still keep.
    released: int = 0
    #: Objects that a conversation stored again while they were being collected.
    spared: int = 0
    #: The store's other parts (clusters, namespaces, before parts): never touched.
    elsewhere: list[Tally] = field(default_factory=list)

    @property
    def deleted_bytes(self) -> int:
        return sum(o.size for o in self.deleted)

    @property
    def conversations(self) -> list[str]:
        """The conversations whose stored content was (or would be) deleted."""
        return sorted({r.workflow_id for o in self.deleted for r in o.referrers})

    def summary(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "retention_seconds": self.retention.total_seconds(),
            "now": self.now.isoformat(),
            "deleted_objects": len(self.deleted),
            "deleted_bytes": self.deleted_bytes,
            "deleted": [
                {
                    "key": o.key,
                    "bytes": o.size,
                    "conversations": sorted(r.workflow_id for r in o.referrers),
                }
                for o in self.deleted
            ],
            "conversations": self.conversations,
            "kept_objects": self.kept_objects,
            "kept_bytes": self.kept_bytes,
            "released_marks": self.released,
            "spared_objects": self.spared,
            "elsewhere": [t.summary() for t in self.elsewhere],
        }


async def namespace_retention(client: Client) -> timedelta:
    """How long the namespace keeps a closed workflow's history."""
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=client.namespace)
    )
    return described.config.workflow_execution_retention_ttl.ToTimedelta()


class Standings:
    """Each conversation's standing at ``now``, asked of Temporal once per id."""

    def __init__(self, client: Client, retention: timedelta, now: datetime) -> None:
        self._client = client
        self._retention = retention
        self._now = now
        self._known: dict[str, asyncio.Future[Standing]] = {}
        self._limit = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def of(self, referrer: Referrer) -> Standing:
        if referrer.namespace not in (self._client.namespace, ""):
            return Standing.LIVE  # another namespace's: not ours to judge
        return await self._of_id(referrer.workflow_id)

    async def _of_id(self, workflow_id: str) -> Standing:
        if workflow_id not in self._known:
            self._known[workflow_id] = asyncio.ensure_future(self._ask(workflow_id))
        return await self._known[workflow_id]

    async def _ask(self, workflow_id: str) -> Standing:
        async with self._limit:
            try:
                described = await self._client.get_workflow_handle(workflow_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return Standing.UNKNOWN
                raise  # anything else: collect nothing rather than guess
        if described.parent_id and await self._of_id(described.parent_id) is Standing.LIVE:
            return Standing.LIVE
        if described.status == WorkflowExecutionStatus.RUNNING or described.close_time is None:
            return Standing.LIVE
        if described.close_time + self._retention > self._now:
            return Standing.LIVE
        return Standing.EXPIRED


async def collect_garbage(
    store: PayloadStore,
    client: Client,
    *,
    now: datetime,
    retention: timedelta | None = None,
    dry_run: bool = False,
    legacy: bool = False,
) -> GcReport:
    """Delete (or with ``dry_run`` only report) every object of ``client``'s part of
    ``store`` that no conversation keeps at ``now`` (a test clock, the Schedule's
    workflow time, or the wall clock); with ``legacy``, also of what was written before
    the store kept parts."""
    if retention is None:
        retention = await namespace_retention(client)
    await store.bind(client)  # its part: this client's cluster and namespace
    report = GcReport(dry_run=dry_run, retention=retention, now=now)
    report.elsewhere = await store.elsewhere()
    found = [(store, stored) for stored in await store.inventory()]
    if legacy and isinstance(store, PartitionedStore):
        refuse_legacy(store, report.elsewhere)
        found += [(store.whole, stored) for stored in await store.whole.inventory()]
        report.elsewhere = [t for t in report.elsewhere if t.segment != UNSPLIT]
    standings = Standings(client, retention, now)
    referrers = sorted({r for _, o in found for r in o.referrers})
    answers = await asyncio.gather(*map(standings.of, referrers))
    standing = dict(zip(referrers, answers, strict=True))
    gone: set[Referrer] = set()  # conversations that lost content in this collection
    for holder, stored in found:
        keeping = [
            referrer
            for referrer, marked in stored.referrers.items()
            if standing[referrer] is Standing.LIVE
            or (standing[referrer] is Standing.UNKNOWN and marked + retention > now)
        ]
        if keeping or not stored.referrers:
            report.kept_objects += 1
            report.kept_bytes += stored.size
            expired = [r for r in stored.referrers if r not in keeping]
            if expired and not dry_run:
                await holder.release(stored, expired)
                report.released += len(expired)
                gone.update(expired)
        elif dry_run or await holder.remove(stored):
            report.deleted.append(stored)
            gone.update(stored.referrers)
        else:
            report.spared += 1
            report.kept_objects += 1
            report.kept_bytes += stored.size
    if not dry_run:
        for referrer in sorted(gone):
            await store.record_collected(referrer, Collected(at=now, retention=retention))
    return report


def refuse_legacy(store: PartitionedStore, elsewhere: list[Tally]) -> None:
    """What was written before parts may be any cluster's that used the store then:
    taken as this cluster's only while no other cluster has a part of it."""
    assert store.cluster is not None
    mine = slug(store.cluster.cluster_id)
    for tally in elsewhere:
        if tally.segment and tally.segment.split("/")[0] != mine:
            who = tally.cluster_id or tally.segment.split("/")[0]
            raise ValueError(
                f"--legacy refused: {store.location()} also has a part of cluster {who} "
                f"(namespace {tally.namespace or tally.segment.split('/')[1]}), so what was "
                "written before parts may be its; delete that by hand once no conversation "
                "started before then is open (see `parley store gc --help`)"
            )


@dataclass(frozen=True)
class StoreStats:
    objects: int
    bytes: int
    oldest: datetime | None
    conversations: int
    #: Objects stored with no conversation (never collected).
    unclaimed: int
    #: The store's other parts (clusters, namespaces, before parts), counted apart.
    elsewhere: list[Tally] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        return {
            "objects": self.objects,
            "bytes": self.bytes,
            "oldest": self.oldest.isoformat() if self.oldest else None,
            "conversations": self.conversations,
            "unclaimed_objects": self.unclaimed,
            "elsewhere": [t.summary() for t in self.elsewhere],
        }


async def store_stats(store: PayloadStore) -> StoreStats:
    """What this cluster's and namespace's part of ``store`` holds, and the other parts
    apart."""
    objects = await store.inventory()
    return StoreStats(
        objects=len(objects),
        bytes=sum(o.size for o in objects),
        oldest=min((o.modified for o in objects), default=None),
        conversations=len({r for o in objects for r in o.referrers}),
        unclaimed=sum(1 for o in objects if not o.referrers),
        elsewhere=await store.elsewhere(),
    )
