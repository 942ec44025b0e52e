"""End to end: many hosts, shown: two ``parley worker`` processes and two ``parley
gateway`` replicas on 127.0.0.1 that share nothing but Temporal and one S3 bucket
(``moto_server``). A reply streamed from gateway 1 is followed on gateway 2 from the
``Last-Event-ID`` gateway 1 gave, with no gap and no repeat; the pending call is decided
on gateway 2; the worker running the approved tool is SIGKILLed mid-call and the other
worker finishes it, the write done once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from tests.support.gateway import EventReader, SseEvent, auth
from tests.support.ports import free_port
from tests.support.processes import (
    LIVENESS_TOOLS,
    PARLEY_MODULE,
    assert_started_twice_done_once,
    process,
    tool_starts,
    worker_env,
    write_slow_write_script,
)
from tests.support.s3 import moto_server
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

TOKEN = "many-hosts-token-0123456789"
#: What a server still starting answers with: not yet.
UNREACHABLE = (httpx.TransportError, OSError)


def ended(events: list[SseEvent]) -> bool:
    return events[-1].type == "RUN_FINISHED"


async def test_two_gateways_and_two_workers_share_one_bucket_and_lose_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    with moto_server(tmp_path / "moto.log") as s3:
        bucket = s3.create_bucket(f"parley-{uuid.uuid4().hex[:10]}")
        script = write_slow_write_script(tmp_path / "script.json", "t1")
        tokens = tmp_path / "tokens"
        tokens.write_text(f"alice {TOKEN}\n")
        tool_log = tmp_path / "tool.log"
        hold = tool_log.with_suffix(".hold")
        hold.touch()
        env = worker_env(
            temporal_env.client.service_client.config.target_host,
            f"parley-hosts-{uuid.uuid4().hex[:8]}",
            f"s3://{bucket}",
            **s3.env(),
            TEMPORAL_NAMESPACE=temporal_env.client.namespace,
            PARLEY_MODEL=f"script:{script}",
            PARLEY_TOOLS=LIVENESS_TOOLS,
            PARLEY_TEST_TOOL_LOG=str(tool_log),
            PARLEY_GATEWAY_TOKENS_FILE=str(tokens),
        )
        ports = [free_port(), free_port()]
        parley = PARLEY_MODULE
        sid = new_session()
        with (
            process([*parley, "worker"], env, tmp_path / "worker-1.log") as worker_1,
            process([*parley, "worker"], env, tmp_path / "worker-2.log") as worker_2,
            process(
                [*parley, "gateway"],
                {**env, "PARLEY_GATEWAY_PORT": str(ports[0])},
                tmp_path / "gateway-1.log",
            ),
            process(
                [*parley, "gateway"],
                {**env, "PARLEY_GATEWAY_PORT": str(ports[1])},
                tmp_path / "gateway-2.log",
            ),
        ):
            one, two = (
                httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{port}", headers=auth(TOKEN), timeout=120
                )
                for port in ports
            )
            async with one, two:
                for name, http in (("gateway 1", one), ("gateway 2", two)):
                    await eventually(
                        lambda http=http: _healthy(http), 60, name, ignoring=UNREACHABLE
                    )
                sent = await one.post(
                    f"/v1/conversations/{sid}/messages", json={"text": "write it once"}
                )
                assert sent.status_code == 200, sent.text
                assert sent.json()["status"] == "awaiting_approval", sent.text

                # Gateway 1 streams the turn's reply up to its tool call's start; the
                # client leaves with the last id it was given.
                events = f"/v1/conversations/{sid}/events"
                async with one.stream("GET", events) as stream:
                    assert stream.status_code == 200
                    on_one = await EventReader(stream).until(
                        lambda seen: seen[-1].type == "TOOL_CALL_START", 60
                    )
                last_id = on_one[-1].id
                assert last_id is not None

                # Gateway 2 goes on from there; the call is decided there too.
                async with two.stream("GET", events, headers={"Last-Event-ID": last_id}) as stream:
                    assert stream.status_code == 200
                    reader = EventReader(stream)
                    first_turn = await reader.until(ended, 60)
                    deciding = asyncio.create_task(
                        two.post(
                            f"/v1/conversations/{sid}/decisions",
                            json={"decisions": [{"tool_call_id": "t1", "action": "approve"}]},
                        )
                    )
                    (first_start,) = await eventually(
                        lambda: tool_starts(tool_log),
                        60,
                        "the approved tool to start",
                        ignoring=(ValueError,),  # a line being written
                    )
                    victim, survivor = (
                        (worker_1, worker_2)
                        if first_start["pid"] == worker_1.pid
                        else (worker_2, worker_1)
                    )
                    victim.kill()  # SIGKILL, mid-call
                    victim.wait(timeout=20)
                    hold.unlink()
                    decided = await asyncio.wait_for(deciding, 120)
                    assert decided.status_code == 200, decided.text
                    assert decided.json()["status"] == "completed", decided.text
                    assert decided.json()["reply"] == "written once"
                    second_turn = await reader.until(ended, 60)
                state = (await two.get(f"/v1/conversations/{sid}")).json()
            assert survivor.poll() is None
        objects = s3.keys(bucket)

    offsets = [int(str(e.id)) for e in [*on_one, *first_turn, *second_turn]]
    assert offsets == list(range(len(offsets))), f"events lost or repeated: {offsets}"
    types = [e.type for e in [*on_one, *first_turn, *second_turn]]
    assert types.count("RUN_FINISHED") == 2 and "TOOL_CALL_RESULT" in types, types
    assert_started_twice_done_once(tool_log, f"conversation-{sid}:t1", [victim.pid, survivor.pid])
    results = [m for m in state["transcript"] if m["type"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["t1"]
    assert results[0]["status"] == "success"
    assert objects, "the payloads went to the shared bucket"


async def _healthy(http: httpx.AsyncClient) -> bool:
    return (await http.get("/healthz")).status_code == 200
