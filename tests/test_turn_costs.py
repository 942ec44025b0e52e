"""What issue 37's activity-side cuts keep: a transcript claim leaves out its store's own
part and is read by every reader of the directory (its own part's, another cluster's, a
store of the directory alone), and claims that name their part or were written before
parts still are; ``heartbeating`` beats while its block runs and never after. Real
files and the SDK's own activity environment; no worker needed."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext
from temporalio.testing import ActivityEnvironment

from parley.activities import heartbeat
from parley.activities.heartbeat import heartbeating
from parley.storage import LocalFileStorageDriver, TranscriptStore
from parley.storage.clusters import ClusterPart
from parley.storage.stores import local_store
from tests.support.store_tools import stored_for

HERE = ClusterPart("cluster-here", "default")
THERE = ClusterPart("cluster-there", "default")
READ = StorageDriverRetrieveContext()


async def test_a_transcript_claim_leaves_its_part_out_and_every_reader_finds_it(
    tmp_path: Path,
) -> None:
    writer = local_store(tmp_path)
    writer.bind_part(HERE)
    store = TranscriptStore(writer)
    first = await store.append(None, [HumanMessage("one", id="h1")], workflow_id="w", namespace="n")
    head = await store.append(first, [HumanMessage("two", id="h2")], workflow_id="w", namespace="n")
    assert "part" not in head.claim and "part" not in first.claim
    # The objects are in the writer's part all the same.
    assert (tmp_path / HERE.segment / head.claim["sha256"][:2] / head.claim["sha256"]).is_file()

    cold_here = local_store(tmp_path)
    cold_here.bind_part(HERE)
    cold_there = local_store(tmp_path)  # another cluster's worker reading the directory
    cold_there.bind_part(THERE)
    for reader in (cold_here, cold_there, local_store(tmp_path), LocalFileStorageDriver(tmp_path)):
        loaded = await TranscriptStore(reader).load(head)
        assert [m.content for m in loaded] == ["one", "two"]

    elsewhere = TranscriptStore(LocalFileStorageDriver(tmp_path / "another-store"))
    with pytest.raises(ValueError, match="PARLEY_PAYLOAD_STORE"):
        await elsewhere.load(head)


async def test_claims_naming_their_part_and_claims_from_before_parts_are_read_as_before(
    tmp_path: Path,
) -> None:
    reader = local_store(tmp_path)
    reader.bind_part(HERE)
    context = stored_for("w")
    [named] = await LocalFileStorageDriver(tmp_path, part=THERE.segment).store(
        context, [Payload(data=b"there")]
    )
    assert named.claim_data["part"] == THERE.segment  # a driver's claims name their part
    [old] = await LocalFileStorageDriver(tmp_path).store(context, [Payload(data=b"old")])
    assert "part" not in old.claim_data
    assert await reader.retrieve(READ, [named, old]) == [
        Payload(data=b"there"),
        Payload(data=b"old"),
    ]
    # A named part is read there and nowhere else.
    moved = StorageDriverClaim(claim_data={**named.claim_data, "part": HERE.segment})
    with pytest.raises(FileNotFoundError, match="not in the store"):
        await reader.retrieve(READ, [moved])


async def test_heartbeating_beats_while_its_block_runs_and_never_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heartbeat, "HEARTBEAT_INTERVAL", timedelta(milliseconds=1))
    beats: list[tuple[object, ...]] = []
    three = asyncio.Event()

    def on_heartbeat(*details: object) -> None:
        beats.append(details)
        if len(beats) == 3:
            three.set()

    async def body() -> int:
        async with heartbeating():
            await three.wait()
        return len(beats)

    environment = ActivityEnvironment()
    environment.on_heartbeat = on_heartbeat
    during = await environment.run(body)
    assert during == 3
    for _ in range(20):  # a loop turn well past several intervals' worth of timers
        await asyncio.sleep(0.002)
    assert len(beats) == 3
