"""End to end: each cluster's data is its own. Two Temporal clusters on one machine (the
session's dev server and one of this module's own) whose worker processes both use the
machine's default payload store (``HOME``/``XDG_DATA_HOME`` of the test's own): ``parley
store gc`` on one collects its own closed conversation and leaves the other's open
conversation whole (it takes its next turn on a fresh worker); ``parley store stats``
counts only its own part; the second worker to start says, in one line, that the first's
cluster uses the store too. Objects written before the store kept a part per cluster
stay readable and untouched, unless ``--legacy`` takes them while no other cluster has a
part. ``parley dev`` keeps its cluster's part in its data dir."""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    StorageDriverRetrieveContext,
)
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.cli.dev import claim_dev_store
from parley.client import Conversations
from parley.client.connection import connect
from parley.config.settings import Settings
from parley.contracts import SEARCH_ATTRIBUTES, workflow_id_for
from parley.storage import LocalFileStorageDriver, PartitionedStore, data_converter, driver_of
from parley.storage.base import UNSPLIT, Referrer
from parley.storage.clusters import ClusterPart, identify
from parley.storage.retention import collect_garbage
from tests.support.processes import PARLEY_MODULE, ROOT, process, worker_env
from tests.support.s3 import S3Server
from tests.support.store_tools import stored_for
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

KB = 1024
USER = "tess"
STORE_TOOLS = "tests.support.store_tools:toolset"


@pytest.fixture(scope="module")
async def cluster_b() -> AsyncIterator[WorkflowEnvironment]:
    """A second cluster on this machine: a dev server of its own (its own cluster id)."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), search_attributes=SEARCH_ATTRIBUTES
    )
    yield env
    await env.shutdown()


def address_of(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


def machine_env(address: str, queue: str, home: Path, **extra: str) -> dict[str, str]:
    """A process of the cluster at ``address`` with the machine's default store: no
    PARLEY_PAYLOAD_STORE, the test's own HOME and XDG_DATA_HOME."""
    env = worker_env(address, queue, "", HOME=str(home), XDG_DATA_HOME=str(home / "data"), **extra)
    del env["PARLEY_PAYLOAD_STORE"]
    return env


def parley_store(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run(
        [*PARLEY_MODULE, "store", *args, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


async def client_of(env: WorkflowEnvironment, base: Path, queue: str) -> Conversations:
    """A client of ``env``'s cluster reading the default store the processes use."""
    settings = Settings(
        temporal_address=address_of(env),
        namespace=env.client.namespace,
        task_queue=queue,
        payload_store=str(base),
    )
    converter = data_converter(settings)
    client = await Client.connect(settings.temporal_address, data_converter=converter)
    await driver_of(converter).bind(client)
    return Conversations(client, settings)


async def test_gc_of_one_cluster_leaves_the_other_clusters_open_conversation_whole(
    temporal_env: WorkflowEnvironment, cluster_b: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    base = home / "data" / "parley" / "payloads"  # the machine's default store
    script = tmp_path / "script.json"
    page = {"name": "big_page", "id": "p1", "args": {"n": 1, "size": 130 * KB}}
    replies = [{"content": "", "tool_calls": [page]}, {"content": "read"}, {"content": "again"}]
    script.write_text(json.dumps(replies))
    model = {"PARLEY_MODEL": f"script:{script}", "PARLEY_TOOLS": STORE_TOOLS}
    queue = f"parley-clusters-{uuid.uuid4().hex[:8]}"
    env_a = machine_env(address_of(temporal_env), queue, home, **model)
    env_b = machine_env(address_of(cluster_b), queue, home, **model)
    a_id = (await identify(temporal_env.client)).cluster_id
    b_id = (await identify(cluster_b.client)).cluster_id
    assert a_id != b_id
    conv_a = await client_of(temporal_env, base, queue)
    conv_b = await client_of(cluster_b, base, queue)
    a_open, a_closed, b_open = new_session(), new_session(), new_session()

    with process([*PARLEY_MODULE, "worker"], env_a, tmp_path / "a.log"):
        for sid in (a_open, a_closed):
            assert (await conv_a.send(sid, USER, "read the page")).reply == "read"
        await conv_a.end(a_closed, USER)
        with process([*PARLEY_MODULE, "worker"], env_b, tmp_path / "b.log"):
            assert (await conv_b.send(b_open, USER, "read the page")).reply == "read"
    written = datetime.now(UTC)
    # The second worker named the first's cluster, in one line; the first named none.
    shared = [line for line in (tmp_path / "b.log").read_text().splitlines() if "also used" in line]
    assert len(shared) == 1 and f"by cluster {a_id} (namespace default, at " in shared[0], shared
    assert str(base) in shared[0]
    assert "also used" not in (tmp_path / "a.log").read_text()

    part_b = LocalFileStorageDriver(base, part=ClusterPart(b_id, "default").segment)
    of_b = {o.key for o in await part_b.inventory()}
    part_a = LocalFileStorageDriver(base, part=ClusterPart(a_id, "default").segment)
    of_a = await part_a.inventory()
    assert of_b and of_a
    # Past a 1-second retention for everything written: the store before parts took B's
    # conversation, unknown to A, for one of A's long gone, and deleted it.
    await eventually(lambda: datetime.now(UTC) > written + timedelta(seconds=1.2), 10)

    stats = parley_store(env_a, "stats")
    assert stats["store"] == str(base)
    assert stats["objects"] == len(of_a) and stats["conversations"] == 2
    assert stats["bytes"] == sum(o.size for o in of_a)
    [b_part] = [p for p in stats["elsewhere"] if p["cluster_id"] == b_id]
    assert b_part["objects"] == len(of_b) and b_part["address"] == address_of(cluster_b)

    gc = parley_store(env_a, "gc", "--retention", "1")
    assert gc["conversations"] == [workflow_id_for(a_closed)] and gc["deleted_objects"] > 0
    assert [p["cluster_id"] for p in gc["elsewhere"]] == [b_id]
    kept_a = {r.workflow_id for o in await part_a.inventory() for r in o.referrers}
    assert kept_a == {workflow_id_for(a_open)}
    assert {o.key for o in await part_b.inventory()} == of_b  # B's part untouched

    # B's open conversation takes its next turn on a fresh worker: its history replayed
    # (the page from the store) and its whole transcript read from the store.
    with process([*PARLEY_MODULE, "worker"], env_b, tmp_path / "b2.log"):
        turn = await conv_b.send(b_open, USER, "read it again")
        assert turn.status == "completed" and turn.reply == "again", turn


@pytest.mark.parametrize("kind", ["local", "s3"])
async def test_what_was_written_before_parts_is_read_and_kept_unless_legacy_takes_it(
    kind: str, temporal_env: WorkflowEnvironment, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "local":
        settings = Settings(payload_store=str(tmp_path / "store"))
    else:
        s3: S3Server = request.getfixturevalue("s3")
        settings = s3.settings(f"{s3.create_bucket(f'parley-{uuid.uuid4().hex[:10]}')}/p")
    store = driver_of(data_converter(settings))
    assert isinstance(store, PartitionedStore)
    client = temporal_env.client
    await store.bind(client)
    assert store.cluster == await identify(client)
    # Written before parts (by a Parley that had no clusters): the same store, without
    # parts.
    old = Payload(data=b"o" * (130 * KB))
    [old_claim] = await store.whole.store(stored_for("conversation-before-parts"), [old])
    [new_claim] = await store.store(stored_for("conversation-now"), [Payload(data=b"n")])
    if kind == "s3":  # the key names the cluster and namespace (twice: part, driver)
        assert new_claim.claim_data["key"].startswith(f"{store.cluster.segment}/v0/ns/default/")
    else:
        assert new_claim.claim_data["part"] == store.cluster.segment
    read = StorageDriverRetrieveContext()
    assert await store.retrieve(read, [old_claim, new_claim]) == [old, Payload(data=b"n")]

    weeks_later = datetime.now(UTC) + timedelta(weeks=3)
    second = timedelta(seconds=1)
    report = await collect_garbage(store, client, now=weeks_later, retention=second)
    assert report.conversations == ["conversation-now"]  # unknown to Temporal, its part
    [before] = report.elsewhere
    assert before.segment == UNSPLIT and before.objects == 1
    assert await store.retrieve(read, [old_claim]) == [old]  # untouched

    # Another namespace of this cluster does not make it another's.
    other_namespace = ClusterPart(store.cluster.cluster_id, "elsewhere")
    await store.write_marker(other_namespace.segment, other_namespace.marker())
    legacy = await collect_garbage(store, client, now=weeks_later, retention=second, legacy=True)
    assert legacy.conversations == ["conversation-before-parts"]
    assert [t.segment for t in legacy.elsewhere] == [other_namespace.segment]
    record = await store.collected(Referrer("default", "conversation-before-parts"))
    assert record is not None and record.retention == second
    with pytest.raises(Exception, match=r"not in the store|retrieve failed"):
        await store.retrieve(read, [old_claim])

    # Once another cluster has a part, what was written before parts may be its.
    [again] = await store.whole.store(stored_for("conversation-before-parts-2"), [old])
    other = ClusterPart("cluster-other", "default", "elsewhere:7233")
    await store.write_marker(other.segment, other.marker())
    with pytest.raises(ValueError, match="also has a part of cluster cluster-other"):
        await collect_garbage(store, client, now=weeks_later, retention=second, legacy=True)
    assert await store.retrieve(read, [again]) == [old]
    await store.aclose()


async def test_parley_dev_keeps_its_part_in_its_data_dir(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    default = tmp_path / "data" / "parley" / "payloads"
    settings = Settings(temporal_address=address_of(temporal_env))
    converter = data_converter(settings)  # the machine's default store, of parts
    client = await Client.connect(settings.temporal_address, data_converter=converter)
    cluster = await identify(client)
    printed = io.StringIO()
    where = await claim_dev_store(client, settings, tmp_path / "dev", Console(file=printed))
    part = tmp_path / "dev" / "payloads" / cluster.segment.split("/")[0]
    link = default / cluster.segment.split("/")[0]
    assert where.startswith(f"{part} (linked from {link}")
    assert link.is_symlink() and link.resolve() == part.resolve()
    # Any client of the cluster, finding the default store, writes into the data dir
    # (connect attaches its client to its store: the store asks it its cluster).
    other = await connect(Settings(temporal_address=address_of(temporal_env)))
    store = driver_of(other.data_converter)
    [claim] = await store.store(stored_for("conversation-dev"), [Payload(data=b"d")])
    digest = claim.claim_data["sha256"]
    assert (part / "default" / digest[:2] / digest).is_file()
    # The data dir moved: the link follows it.
    moved = tmp_path / "moved"
    await claim_dev_store(client, settings, moved, Console(file=printed))
    assert link.resolve() == (moved / "payloads" / link.name).resolve()
    assert "warning" not in printed.getvalue()
