"""The one interface both payload stores implement (the local directory and S3): a
Temporal ``StorageDriver`` for the claim checks, plus what retention needs to see and
remove: every stored object with the conversations that refer to it, and how much of
the store is other parts' (``Tally``: another cluster's or namespace's, or written
before the store kept a part per cluster).

Outside the workflow sandbox (worker, activities, clients).
"""

from __future__ import annotations

import hashlib
import json
from abc import abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from temporalio.converter import (
    StorageDriver,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

if TYPE_CHECKING:
    from temporalio.client import Client

    from parley.storage.clusters import ClusterPart

#: The part of a store written before it kept a part per cluster and namespace.
UNSPLIT = ""


@dataclass(frozen=True, order=True)
class Referrer:
    """A conversation (a workflow id in a namespace) that stored, so may read, an object.
    Every run of the id (continue-as-new) and every worker share it."""

    namespace: str
    workflow_id: str

    def digest(self) -> str:
        """A file-name-safe name for this referrer (ids may hold any character)."""
        return hashlib.sha256(f"{self.namespace}\n{self.workflow_id}".encode()).hexdigest()[:32]


def referrer_of(context: StorageDriverStoreContext) -> Referrer | None:
    """The conversation a payload is stored for. Temporal names the workflow for every
    payload a workflow, its activities or a client of it stores; a payload stored with
    no workflow (a standalone activity, no context) has none and is never collected."""
    target = context.target
    if isinstance(target, StorageDriverWorkflowInfo) and target.id:
        return Referrer(target.namespace or "", target.id)
    return None


@dataclass(frozen=True)
class StoredObject:
    """One object of a store: its key, size, when it was written, and the conversations
    that refer to it with when each last stored it."""

    key: str
    size: int
    modified: datetime
    referrers: dict[Referrer, datetime] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Collected:
    """Retention's record that it deleted (or let go of) what a conversation stored:
    when, and the retention period it applied. Kept in the store beside the objects, so
    a reader told that a conversation's content is gone is told when and why."""

    at: datetime
    retention: timedelta

    def to_json(self) -> bytes:
        return json.dumps(
            {"at": self.at.isoformat(), "retention_seconds": self.retention.total_seconds()}
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Collected | None:
        """The record, or None for one that cannot be read (never a reason to fail)."""
        try:
            data = json.loads(raw)
            return cls(
                datetime.fromisoformat(data["at"]), timedelta(seconds=data["retention_seconds"])
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Tally:
    """One part of a store that is not the reader's: its objects and bytes, and whose it
    is as its marker says (``segment`` ``UNSPLIT``: written before the store kept a
    part per cluster and namespace, so whose it is cannot be told)."""

    segment: str
    objects: int
    bytes: int
    cluster_id: str | None = None
    namespace: str | None = None
    address: str | None = None

    @classmethod
    def marked(cls, segment: str, objects: int, size: int, who: ClusterPart | None) -> Tally:
        """A part's tally, whose it is as its marker (``who``, if it has one) says."""
        if who is None:
            return cls(segment, objects, size)
        return cls(segment, objects, size, who.cluster_id, who.namespace, who.address)

    def summary(self) -> dict[str, object]:
        return {
            "part": self.segment or None,
            "cluster_id": self.cluster_id,
            "namespace": self.namespace,
            "address": self.address,
            "objects": self.objects,
            "bytes": self.bytes,
        }


class PayloadStore(StorageDriver):
    """A claim-check driver that retention can inventory and prune. Both stores keep
    the same promise: an object is readable until :meth:`remove` is called for it, and
    ``remove`` refuses (returns False) when a referrer appeared since the inventory."""

    @abstractmethod
    def location(self) -> str:
        """Where the objects are, in one line (a directory, ``s3://bucket/prefix``)."""

    @abstractmethod
    def check_access(self) -> None:
        """Raise ``ValueError`` with one line when the store cannot be used (a missing
        bucket, refused credentials, a directory that cannot be created)."""

    @abstractmethod
    async def inventory(self) -> list[StoredObject]:
        """Every stored object with its referrers."""

    @abstractmethod
    async def remove(self, stored: StoredObject) -> bool:
        """Delete ``stored`` unless a referrer it did not have at inventory time has
        appeared; True when it is gone."""

    @abstractmethod
    async def release(self, stored: StoredObject, referrers: list[Referrer]) -> None:
        """Forget that ``referrers`` (conversations past retention) refer to ``stored``,
        which other conversations still need."""

    @abstractmethod
    async def record_collected(self, referrer: Referrer, collected: Collected) -> None:
        """Remember that retention deleted what ``referrer`` stored (or let go of its
        marks); the first record stays (the content went then)."""

    @abstractmethod
    async def collected(self, referrer: Referrer) -> Collected | None:
        """Retention's record for ``referrer``, if it collected what it stored."""

    @abstractmethod
    async def tally(self) -> list[Tally]:
        """Every part of the directory or bucket (prefix) with its objects and bytes, as
        its marker names it, and what was written before parts (``UNSPLIT``)."""

    @abstractmethod
    async def write_marker(self, segment: str, marker: bytes) -> None:
        """Write part ``segment``'s marker (``clusters.ClusterPart.marker``)."""

    async def bind(self, client: Client) -> None:
        """Take ``client``'s cluster and namespace as this store's own part (a store with
        parts, ``parts.PartitionedStore``); a store of one part has nothing to do."""

    async def elsewhere(self) -> list[Tally]:
        """The parts of the store that are not this one's (none for a store of one
        part): counted apart, never listed, changed nor deleted."""
        return []

    def home(self) -> str | None:
        """The part (``<cluster>/<namespace>``) a claim that names none is looked for in
        first: this store's own, once known (None: a store of one part, or not bound)."""
        return None

    async def aclose(self) -> None:
        """Close connections the store holds open."""


async def collected_record(driver: StorageDriver, referrer: Referrer) -> Collected | None:
    """Retention's record for ``referrer`` in ``driver``; None for a driver that keeps no
    records (one a ``module:factory`` store built) or one it could not read."""
    if not isinstance(driver, PayloadStore):
        return None
    try:
        return await driver.collected(referrer)
    except Exception:  # a store that cannot say: the reader's own failure tells the rest
        return None
