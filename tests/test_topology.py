"""End to end: docker-compose.yml's topology without Docker: a Temporal dev server with
a persistence file, two worker processes and the gateway process. A worker SIGKILLed in
the middle of an approved tool call; the conversation finishes on the other worker, with
one result per call and the write done once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.contracts import SEARCH_ATTRIBUTES
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
from tests.support.waiting import eventually

TOKEN = "topology-token-0123456789"
#: What a server still starting answers with: not yet.
UNREACHABLE = (httpx.TransportError, OSError)


async def test_two_workers_and_the_gateway_survive_a_worker_killed_mid_call(
    tmp_path: Path,
) -> None:
    env_server = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        dev_server_database_filename=str(tmp_path / "temporal.db"),
        search_attributes=SEARCH_ATTRIBUTES,
    )
    try:
        await _run_topology(env_server.client.service_client.config.target_host, tmp_path)
    finally:
        await env_server.shutdown()


async def _run_topology(address: str, tmp_path: Path) -> None:
    script_file = write_slow_write_script(tmp_path / "script.json", "t1")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    tool_log = tmp_path / "tool.log"
    gateway_port = free_port()
    env = worker_env(
        address,
        f"parley-topology-{uuid.uuid4().hex[:8]}",
        tmp_path / "payloads",
        PARLEY_MODEL=f"script:{script_file}",
        PARLEY_TOOLS=LIVENESS_TOOLS,
        PARLEY_TEST_TOOL_LOG=str(tool_log),
        PARLEY_GATEWAY_TOKENS_FILE=str(tokens),
        PARLEY_GATEWAY_PORT=str(gateway_port),
    )
    parley = PARLEY_MODULE
    hold = tool_log.with_suffix(".hold")
    hold.touch()
    sid = f"topology-{uuid.uuid4().hex[:8]}"
    base = f"http://127.0.0.1:{gateway_port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def starts() -> list[dict]:
        return tool_starts(tool_log)

    with (
        process([*parley, "worker"], env, tmp_path / "worker-1.log") as worker_1,
        process([*parley, "worker"], env, tmp_path / "worker-2.log") as worker_2,
        process([*parley, "gateway"], env, tmp_path / "gateway.log"),
    ):
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as http:

            async def gateway_up() -> bool:
                return (await http.get("/healthz")).status_code == 200

            await eventually(gateway_up, 60, "the gateway", ignoring=UNREACHABLE)
            sent = await http.post(
                f"/v1/conversations/{sid}/messages", json={"text": "write it once"}
            )
            assert sent.status_code == 200, sent.text
            assert sent.json()["status"] == "awaiting_approval"
            deciding = asyncio.create_task(
                http.post(
                    f"/v1/conversations/{sid}/decisions",
                    json={"decisions": [{"tool_call_id": "t1", "action": "approve"}]},
                )
            )

            async def started() -> list[dict]:
                return starts()

            (first_start,) = await eventually(
                started, 60, "the tool to start", ignoring=UNREACHABLE
            )
            victim, survivor = (
                (worker_1, worker_2) if first_start["pid"] == worker_1.pid else (worker_2, worker_1)
            )
            victim.kill()  # SIGKILL, mid-call
            victim.wait(timeout=20)
            hold.unlink()
            decided = await asyncio.wait_for(deciding, timeout=120)
            assert survivor.poll() is None
            assert decided.status_code == 200, decided.text
            assert decided.json()["status"] == "completed"
            assert decided.json()["reply"] == "written once"
            state = (await http.get(f"/v1/conversations/{sid}")).json()

    assert_started_twice_done_once(tool_log, f"conversation-{sid}:t1", [victim.pid, survivor.pid])
    results = [m for m in state["transcript"] if m["type"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["t1"]
    assert results[0]["status"] == "success"
