"""Both payload stores behave the same through one interface: the local directory and S3
(``moto_server`` on 127.0.0.1), each as one part and as a cluster's part of a store of
parts. What is stored reads back; a damaged object is refused, never taken whole; the
inventory names who stored what; a removed object is gone. The local directory keeps
shared bytes once and never removes an object that a conversation stored since the
inventory."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from parley.storage import (
    LocalFileStorageDriver,
    PartitionedStore,
    PayloadStore,
    Referrer,
    data_converter,
    driver_of,
)
from parley.storage.clusters import ClusterPart
from parley.storage.stores import local_store
from tests.support.s3 import S3Server
from tests.support.store_tools import stored_for

CLUSTER = ClusterPart("cluster-a", "default")


@pytest.fixture(params=["local", "local part", "s3 part"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PayloadStore]:
    if request.param == "local":
        found: PayloadStore = LocalFileStorageDriver(tmp_path / "store")
    elif request.param == "local part":
        found = local_store(tmp_path / "store")
    else:
        s3: S3Server = request.getfixturevalue("s3")
        bucket = s3.create_bucket(f"parley-{uuid.uuid4().hex[:10]}")
        found = driver_of(data_converter(s3.settings(f"{bucket}/some/prefix")))
    if isinstance(found, PartitionedStore):
        found.bind_part(CLUSTER)  # as a worker's start does
    assert isinstance(found, PayloadStore)
    yield found
    await found.aclose()


async def local_part(store: PayloadStore) -> LocalFileStorageDriver | None:
    """The local directory (or part of one) ``store`` writes to; None for S3."""
    if isinstance(store, PartitionedStore):
        store = await store.part()
    return store if isinstance(store, LocalFileStorageDriver) else None


async def test_what_is_stored_reads_back_and_the_inventory_names_who_stored_it(
    store: PayloadStore,
) -> None:
    payload = Payload(metadata={"encoding": b"binary/plain"}, data=b"p" * 300_000)
    [first] = await store.store(stored_for("conversation-a/1"), [payload])
    [second] = await store.store(stored_for("conversation-b"), [payload])
    [unclaimed] = await store.store(StorageDriverStoreContext(), [Payload(data=b"no one's")])
    read = StorageDriverRetrieveContext()
    assert await store.retrieve(read, [first, second]) == [payload, payload]

    objects = await store.inventory()
    owners = sorted(sorted(r.workflow_id for r in o.referrers) for o in objects)
    local = await local_part(store)
    if local:  # the same bytes once, both refer to it
        assert owners == [[], ["conversation-a/1", "conversation-b"]]
    else:  # a key per conversation: its id is in the key
        assert owners == [[], ["conversation-a/1"], ["conversation-b"]]
    assert all(o.size >= 300_000 for o in objects if o.referrers)

    [of_a] = [o for o in objects if Referrer("default", "conversation-a/1") in o.referrers]
    if local:
        await store.release(of_a, [Referrer("default", "conversation-a/1")])
        [still] = [o for o in await store.inventory() if o.referrers]
        assert list(still.referrers) == [Referrer("default", "conversation-b")]
    assert await store.remove(of_a)
    with pytest.raises(Exception, match=r"not in the store|retrieve failed"):
        await store.retrieve(read, [first])
    assert await store.retrieve(read, [unclaimed]) == [Payload(data=b"no one's")]


async def test_a_damaged_object_is_refused_on_both_stores(
    store: PayloadStore, request: pytest.FixtureRequest
) -> None:
    payload = Payload(metadata={"encoding": b"binary/plain"}, data=b"d" * 200_000)
    [claim] = await store.store(stored_for("conversation-d"), [payload])
    [stored] = await store.inventory()
    if local := await local_part(store):
        path = local.root / stored.key[:2] / stored.key
        path.write_bytes(path.read_bytes()[: stored.size // 2])
    else:
        s3: S3Server = request.getfixturevalue("s3")
        client = s3.client()
        bucket = claim.claim_data["bucket"]
        whole = client.get_object(Bucket=bucket, Key=stored.key)["Body"].read()
        client.put_object(Bucket=bucket, Key=stored.key, Body=whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"damaged|integrity check failed"):
        await store.retrieve(StorageDriverRetrieveContext(), [claim])


async def test_the_local_store_keeps_an_object_stored_again_since_the_inventory(
    tmp_path: Path,
) -> None:
    store = LocalFileStorageDriver(tmp_path)
    payload = Payload(data=b"shared")
    await store.store(stored_for("conversation-old"), [payload])
    [seen] = await store.inventory()
    await store.store(stored_for("conversation-new"), [payload])  # meanwhile
    assert not await store.remove(seen)
    [kept] = await store.inventory()
    assert {r.workflow_id for r in kept.referrers} == {"conversation-old", "conversation-new"}
