"""End to end: ``parley store gc [--dry-run]`` and ``parley store stats``, as a user
runs them (the CLI in its own process), on both stores: the local directory and S3
(``moto_server`` on 127.0.0.1). A dry run prints what it would delete and deletes
nothing; a run deletes it and says so; stats count objects, bytes and the oldest."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import workflow_id_for
from parley.storage import data_converter, driver_of
from parley.tools import ToolRegistry
from parley.worker.wiring import build_worker
from tests.support import call, script
from tests.support.processes import PARLEY_MODULE, ROOT, worker_env
from tests.support.s3 import S3Server
from tests.support.store_tools import toolset
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

USER = "wes"


def parley(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*PARLEY_MODULE, "store", *args],
        cwd=ROOT,
        env={**env, "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


@pytest.mark.parametrize("kind", ["local", "s3"])
async def test_gc_dry_run_deletes_nothing_then_gc_deletes_and_stats_count(
    kind: str, temporal_env: WorkflowEnvironment, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    address = temporal_env.client.service_client.config.target_host
    queue = f"parley-cli-{uuid.uuid4().hex[:8]}"
    where = {"temporal_address": address, "namespace": temporal_env.client.namespace}
    if kind == "local":
        spec, extra = str(tmp_path / "store"), {}
        settings = Settings(task_queue=queue, payload_store=spec, **where)  # type: ignore[arg-type]
    else:
        s3: S3Server = request.getfixturevalue("s3")
        bucket = s3.create_bucket(f"parley-{uuid.uuid4().hex[:10]}")
        spec, extra = f"s3://{bucket}/cli", s3.env()
        settings = s3.settings(f"{bucket}/cli", task_queue=queue, **where)
    converter = data_converter(settings)  # the store of parts the CLI opens
    env = worker_env(
        address, queue, spec, TEMPORAL_NAMESPACE=temporal_env.client.namespace, **extra
    )
    client = await Client.connect(
        address, namespace=temporal_env.client.namespace, data_converter=converter
    )
    store = driver_of(converter)
    model = script(
        {"content": "", "tool_calls": [call("big_page", "p1", n=1, size=300 * 1024)]},
        {"content": "read"},
    )
    closed, open_ = new_session(), new_session()
    async with build_worker(client, settings, registry=ToolRegistry(toolset()), model=model):
        conv = Conversations(client, settings)
        for sid in (closed, open_):
            assert (await conv.send(sid, USER, "read")).reply == "read"
        await conv.end(closed, USER)
        ended = (await conv.handle(closed).describe()).close_time
        assert ended is not None
        await eventually(lambda: datetime.now(UTC) > ended + timedelta(seconds=1.2), 10)

    stats = json.loads(parley(env, "stats", "--json").stdout)
    before = await store.inventory()  # type: ignore[attr-defined]
    assert stats["objects"] == len(before) and stats["conversations"] == 2
    assert stats["bytes"] == sum(o.size for o in before) > 300 * 1024
    assert datetime.fromisoformat(stats["oldest"]) == min(o.modified for o in before)
    text = parley(env, "stats").stdout
    assert f"{len(before)} object(s), {stats['bytes']} bytes, oldest " in text

    dry = parley(env, "gc", "--dry-run", "--retention", "1").stdout.splitlines()
    would = [line for line in dry if line.startswith("would delete ") and " bytes; " in line]
    assert would and all(line.endswith(f"; {workflow_id_for(closed)})") for line in would), dry
    assert dry[-1].startswith(f"would delete {len(would)} object(s), ")
    assert len(await store.inventory()) == len(before)  # type: ignore[attr-defined]

    done = parley(env, "gc", "--retention", "1").stdout.splitlines()
    assert done == [line.replace("would delete", "deleted", 1) for line in dry]
    after = await store.inventory()  # type: ignore[attr-defined]
    assert {r.workflow_id for o in after for r in o.referrers} == {workflow_id_for(open_)}
    assert "deleted 0 object(s)" in parley(env, "gc", "--retention", "1").stdout
    assert json.loads(parley(env, "stats", "--json").stdout)["objects"] == len(after)
    await store.aclose()  # type: ignore[attr-defined]
