"""End to end: the built-in S3 payload store against a real S3 API server on 127.0.0.1
(``moto_server``): two worker processes that share nothing but the bucket, a missing
bucket and refused credentials stopping the worker and gateway with one line, and
injected 503s and cut connections retried with nothing lost."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, ScheduleActionStartWorkflow
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
)
from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.storage import PartitionedStore, TranscriptStore, data_converter, driver_of
from parley.storage.clusters import ClusterPart
from parley.storage.s3 import S3PayloadStore, S3Retry
from parley.storage.schedule import gc_schedule_id
from tests.support import call
from tests.support.processes import PARLEY_MODULE, ROOT, process, worker_env
from tests.support.s3 import FaultyProxy, S3Server, moto_server
from tests.support.store_tools import stored_for
from tests.support.transcripts import new_session

MB = 1024 * 1024
STORE_TOOLS = "tests.support.store_tools:toolset"


def new_bucket(s3: S3Server) -> str:
    return s3.create_bucket(f"parley-{uuid.uuid4().hex[:10]}")


def store_for(endpoint: str, bucket: str, s3: S3Server) -> PartitionedStore:
    """The bucket's part of one cluster and namespace, as a worker's start binds it."""
    settings = dataclasses.replace(s3.settings(bucket), aws_endpoint_url=endpoint)
    store = driver_of(data_converter(settings))
    assert isinstance(store, PartitionedStore) and isinstance(store.whole, S3PayloadStore)
    store.whole.objects.retry = S3Retry(attempts=8, first_delay=0.05, max_delay=0.5)
    store.bind_part(ClusterPart("cluster-s3", "default"))
    return store


async def test_a_second_worker_with_only_the_bucket_finishes_what_the_first_began(
    temporal_env: WorkflowEnvironment, s3: S3Server, tmp_path: Path
) -> None:
    """Worker A (its own empty local directory) runs six turns: a 5 MB tool result and
    618 messages. A stops; worker B (another empty directory, the same bucket) replays
    the conversation (the 5 MB result comes from S3), reads the whole transcript for
    its model call, and answers."""
    bucket = new_bucket(s3)
    queue = f"parley-s3-{uuid.uuid4().hex[:8]}"
    settings = s3.settings(bucket, task_queue=queue, worker_wait_seconds=90)
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(
        address, namespace=temporal_env.client.namespace, data_converter=data_converter(settings)
    )
    conv = Conversations(client, settings)
    entries = []
    for turn in range(6):  # 100 calls a turn, in two replies (at most 64 calls a reply)
        calls = [call("echo", f"e{turn}-{n}", n=n) for n in range(100)]
        if turn == 0:
            calls[0] = call("big_page", "big", n=0, size=5 * MB)
        entries += [
            {"content": "", "tool_calls": calls[:50]},
            {"content": "", "tool_calls": calls[50:]},
            {"content": f"turn {turn} done"},
        ]
    entries.append({"content": "finished by the second worker"})
    script = tmp_path / "script.json"
    script.write_text(json.dumps(entries))

    def env(home: Path) -> dict[str, str]:
        home.mkdir()
        return worker_env(
            address,
            queue,
            f"s3://{bucket}",
            **s3.env(),
            TEMPORAL_NAMESPACE=client.namespace,
            HOME=str(home),
            XDG_DATA_HOME=str(home / "data"),
            PARLEY_MODEL=f"script:{script}",
            PARLEY_TOOLS=STORE_TOOLS,
            PARLEY_STORE_GC_EVERY_SECONDS="3600",  # both keep the one retention Schedule
        )

    sid = new_session()
    with process([*PARLEY_MODULE, "worker"], env(tmp_path / "a"), tmp_path / "a.log"):
        for turn in range(6):
            result = await conv.send(sid, "uma", f"turn {turn}")
            assert result.status == "completed" and result.reply == f"turn {turn} done", result
    assert (
        max(s3.client().head_object(Bucket=bucket, Key=k)["ContentLength"] for k in s3.keys(bucket))
        > 5 * MB
    )

    with process([*PARLEY_MODULE, "worker"], env(tmp_path / "b"), tmp_path / "b.log"):
        result = await conv.send(sid, "uma", "and finish")
        assert result.status == "completed", (result, (tmp_path / "b.log").read_text()[-3000:])
        assert result.reply == "finished by the second worker"  # its 19th model call
        whole = await conv.transcript(sid, "uma", offset=0, limit=1000)
    schedule = client.get_schedule_handle(gc_schedule_id(queue))
    described = await schedule.describe()
    await schedule.delete()
    assert described.schedule.spec.intervals[0].every == timedelta(hours=1)
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert (action.workflow, action.task_queue) == ("ParleyStoreGc", queue)
    await driver_of(client.data_converter).aclose()
    assert len(whole) == 6 * 104 + 2  # a message, 2 replies of calls, 100 answers, a reply
    [big] = [m for m in whole if isinstance(m, ToolMessage) and m.tool_call_id == "big"]
    assert str(big.content).startswith("page 0: xxx")
    # Neither worker wrote a local payload directory: the bucket was all they shared.
    assert not [p for p in (tmp_path / "a").rglob("*") if p.is_file()]
    assert not [p for p in (tmp_path / "b").rglob("*") if p.is_file()]


def run_parley(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARLEY_MODULE, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_a_missing_bucket_stops_the_worker_and_the_gateway_with_one_line(
    s3: S3Server, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("ann t0k3n-ann-0123456789\n")
    env = worker_env(
        "127.0.0.1:1",  # the store is checked before Temporal is contacted
        "parley",
        "s3://no-such-bucket/parley",
        **s3.env(),
        PARLEY_GATEWAY_TOKENS_FILE=str(tokens),
        PARLEY_TOOLS=STORE_TOOLS,
    )
    for command in (["worker"], ["gateway", "--port", "1"]):
        line = one_error_line(run_parley(command, env))
        assert "bucket 'no-such-bucket' does not exist" in line, line


def test_refused_credentials_stop_the_worker_with_one_line(tmp_path: Path) -> None:
    # A server of its own that checks credentials (moto's IAM checks from the first call).
    with moto_server(tmp_path / "moto.log", INITIAL_NO_AUTH_ACTION_COUNT="0") as checking:
        env = worker_env(
            "127.0.0.1:1", "parley", "s3://some-bucket", **checking.env(), PARLEY_TOOLS=STORE_TOOLS
        )
        line = one_error_line(run_parley(["worker"], env))
    assert "refused the credentials" in line and "AWS_ACCESS_KEY_ID" in line, line


async def test_five_503s_on_put_and_on_get_are_retried_and_nothing_is_lost(
    s3: S3Server,
) -> None:
    bucket = new_bucket(s3)
    with FaultyProxy(s3.endpoint) as proxy:
        store = store_for(proxy.endpoint, bucket, s3)
        payload = Payload(metadata={"encoding": b"binary/plain"}, data=b"5" * (5 * MB))
        proxy.fail("PUT", 5)
        [claim] = await store.store(stored_for("conversation-a"), [payload])
        proxy.fail("GET", 5)
        [back] = await store.retrieve(StorageDriverRetrieveContext(), [claim])
        assert back == payload

        # The transcript chain through the same faults: 600 messages, read back whole
        # by a cold reader while every fifth request fails.
        from langchain_core.messages import AIMessage, HumanMessage

        writer = TranscriptStore(store)
        head, expected = None, []
        for n in range(300):
            if n % 60 == 0:
                proxy.fail("PUT", 5)
            pair = [
                HumanMessage(content=f"q{n}", id=f"h{n}"),
                AIMessage(content=f"a{n}", id=f"m{n}"),
            ]
            head = await writer.append(
                head, pair, workflow_id="conversation-t", namespace="default"
            )
            expected += pair
        proxy.fail("GET", 5)
        assert await TranscriptStore(store_for(proxy.endpoint, bucket, s3)).load(head) == expected
        await store.aclose()
    assert proxy.injected.count("503 PUT") == 5 * 6 and proxy.injected.count("503 GET") == 10


async def test_a_put_cut_mid_body_is_retried_and_a_damaged_object_is_never_taken_whole(
    s3: S3Server,
) -> None:
    bucket = new_bucket(s3)
    with FaultyProxy(s3.endpoint) as proxy:
        store = store_for(proxy.endpoint, bucket, s3)
        payload = Payload(metadata={"encoding": b"binary/plain"}, data=b"c" * (2 * MB))
        proxy.cut("PUT", 2)
        [claim] = await store.store(stored_for("conversation-c"), [payload])
        assert proxy.injected == ["cut PUT", "cut PUT"]
        assert (await store.retrieve(StorageDriverRetrieveContext(), [claim])) == [payload]
        await store.aclose()

    # A damaged object (half of it, as a broken writer without S3's atomic PUT would
    # leave) is refused by the driver's checksum, never returned as the payload.
    key = claim.claim_data["key"]
    whole = s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.client().put_object(Bucket=bucket, Key=key, Body=whole[: len(whole) // 2])
    reader = store_for(s3.endpoint, bucket, s3)
    with pytest.raises(ValueError, match="integrity check failed"):
        await reader.retrieve(
            StorageDriverRetrieveContext(), [StorageDriverClaim(claim.claim_data)]
        )
    await reader.aclose()
