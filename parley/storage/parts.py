"""A payload store of parts: the directory or bucket ``PARLEY_PAYLOAD_STORE`` names (or
the machine's default) seen by one cluster and namespace, which writes, lists and
collects only its own part (``clusters``), and reads any claim.

Outside the workflow sandbox (worker, activities, clients). Which part is this
process's is Temporal's answer (``clusters.identify``): the worker binds its store at
start (:func:`claim_part`, which also records the part's marker and names, in one line,
any other cluster using the store), so do ``parley dev`` and ``parley store``; a worker
built on a client, and every client ``parley.client.connection.connect`` makes (a CLI
command storing a large message, the gateway), asks that client on its first write
(:func:`attach_client`); a store no client was attached to refuses to write. Reading
needs no answer: a claim names its part, or names none (written before parts, or a
transcript claim, whose reader is of the writer's part) and is looked for in this
store's own part first (``home``) when it is known, then at the top and in the other
parts (``local``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from parley.storage.base import Collected, PayloadStore, Referrer, StoredObject, Tally
from parley.storage.clusters import ClusterPart, identify, shared_line, unbound

if TYPE_CHECKING:
    from temporalio.client import Client


class PartitionedStore(PayloadStore):
    """``whole`` (the directory or bucket, read for any claim, tallied for the parts
    that are not this one) and this cluster's and namespace's part of it, made by
    ``part_of`` once the cluster is known."""

    def __init__(
        self,
        whole: PayloadStore,
        part_of: Callable[[str], PayloadStore],
    ) -> None:
        self.whole = whole
        self._part_of = part_of
        self._part: PayloadStore | None = None
        self._client: Client | None = None
        #: The cluster and namespace whose part this is, once known.
        self.cluster: ClusterPart | None = None

    def name(self) -> str:
        return self.whole.name()  # a claim names its driver: the same as before parts

    def type(self) -> str:
        return self.whole.type()

    def location(self) -> str:
        return self.whole.location()

    def check_access(self) -> None:
        self.whole.check_access()

    def bind_part(self, cluster: ClusterPart) -> None:
        """Write, list and collect ``cluster``'s part from now on; refused for a store
        already bound to another (a client of another cluster must not judge it)."""
        if self.cluster is None:
            self.cluster, self._part = cluster, self._part_of(cluster.segment)
        elif self.cluster != cluster:
            raise ValueError(
                f"this payload store is bound to cluster {self.cluster.cluster_id} "
                f"(namespace {self.cluster.namespace}), not {cluster.cluster_id} "
                f"(namespace {cluster.namespace}): use each cluster's own client and store"
            )

    async def bind(self, client: Client) -> None:
        self.bind_part(await identify(client))

    def attach(self, client: Client) -> None:
        """Ask ``client``'s cluster, when the part is first needed (a worker built on a
        client: its connection, not the settings' address, says which cluster)."""
        self._client = self._client or client

    async def part(self) -> PayloadStore:
        """This cluster's and namespace's part (asked of the cluster the first time,
        when no client bound it)."""
        if self._part is None:
            if self._client is None:
                raise unbound()
            self.bind_part(await identify(self._client))
        assert self._part is not None
        return self._part

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await (await self.part()).store(context, payloads)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        # A claim that names its part is read there; one that names none is looked for
        # in this store's part first (``home``), when it is known.
        return await (self._part or self.whole).retrieve(context, claims)

    def home(self) -> str | None:
        return self.cluster.segment if self.cluster is not None else None

    async def inventory(self) -> list[StoredObject]:
        return await (await self.part()).inventory()

    async def remove(self, stored: StoredObject) -> bool:
        return await (await self.part()).remove(stored)

    async def release(self, stored: StoredObject, referrers: list[Referrer]) -> None:
        await (await self.part()).release(stored, referrers)

    async def record_collected(self, referrer: Referrer, collected: Collected) -> None:
        await (await self.part()).record_collected(referrer, collected)

    async def collected(self, referrer: Referrer) -> Collected | None:
        # A collection before parts recorded it at the top.
        found = await (await self.part()).collected(referrer)
        return found or await self.whole.collected(referrer)

    async def tally(self) -> list[Tally]:
        return await self.whole.tally()

    async def write_marker(self, segment: str, marker: bytes) -> None:
        await self.whole.write_marker(segment, marker)

    async def elsewhere(self) -> list[Tally]:
        await self.part()
        assert self.cluster is not None
        return [t for t in await self.whole.tally() if t.segment != self.cluster.segment]

    async def aclose(self) -> None:
        if self._part is not None:
            await self._part.aclose()
        await self.whole.aclose()


def attach_client(client: Client) -> None:
    """The store of ``client``'s data converter asks ``client`` for its part."""
    store = client.data_converter.external_storage
    for driver in store.drivers if store is not None else ():
        if isinstance(driver, PartitionedStore):
            driver.attach(client)


async def claim_part(client: Client, store: PayloadStore) -> list[str]:
    """At worker start: bind ``store`` to ``client``'s cluster and namespace, record its
    part's marker, and say, one line each, which other clusters use the store (each
    keeps to its own part; a line, not a refusal)."""
    if not isinstance(store, PartitionedStore):
        return []  # a store of one part (built on a directory or a driver alone)
    await store.bind(client)
    mine = store.cluster
    assert mine is not None
    await store.write_marker(mine.segment, mine.marker())
    others: dict[str, ClusterPart] = {}
    for tally in await store.elsewhere():
        if tally.cluster_id is not None and tally.cluster_id != mine.cluster_id:
            other = ClusterPart(tally.cluster_id, tally.namespace or "?", tally.address or "")
            others.setdefault(other.cluster_id, other)
    return [shared_line(store.location(), mine, other) for other in others.values()]
