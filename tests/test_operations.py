"""End to end: what operators expect of the services, with real ``parley gateway`` and
``parley worker`` processes on a real dev server:

- the gateway's ``/healthz`` (alive: no token, no Temporal call) and ``/readyz``
  (Temporal answers; else 503 in the one error shape, one line); a gateway started
  before Temporal serves meanwhile and connects once it answers;
- SIGTERM drains the gateway: no new connection, a following stream ends at once with
  its reconnectable end (a comment, ``retry:``, the last ``id:``), a turn's stream
  finishes its run (or, past the grace period, ends reconnectable too), the process
  exits 0; the client resumes on a second gateway from its ``Last-Event-ID``, no gap
  and no repeat;
- a worker stops after ``PARLEY_WORKER_GRACE_SECONDS``: a tool still running then runs
  again on the next worker, once (``tests/test_liveness.py``: one that finishes within
  it); its heartbeat file (``--health-file``) is what ``parley worker --check`` reads.

What ends a stream or a call is a held tool let go, a signal or the drain; the one
clock is the grace period a test sets (an hour where it must not matter).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.contracts import SEARCH_ATTRIBUTES, Decision
from parley.storage import LocalFileStorageDriver
from tests.support.ports import free_port
from tests.support.processes import (
    PARLEY_MODULE,
    assert_started_twice_done_once,
    process,
    slow_write_worker,
    slow_write_worker_env,
    tool_starts,
    worker_env,
    worker_process,
)
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

TOKEN = "operations-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SSE = {"Accept": "text/event-stream"}
#: What a process still starting answers: not yet.
UNREACHABLE = (httpx.TransportError, OSError)


@contextmanager
def gateway(
    env: dict[str, str], home: Path, name: str, *options: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``parley gateway`` process on a free port: its URL and process."""
    port = free_port()
    (home / "tokens").write_text(f"olive {TOKEN}\n")
    environment = {
        **env,
        "PARLEY_GATEWAY_TOKENS_FILE": str(home / "tokens"),
        "PARLEY_GATEWAY_PORT": str(port),
    }
    with process([*PARLEY_MODULE, "gateway", *options], environment, home / f"{name}.log") as gw:
        yield f"http://127.0.0.1:{port}", gw


async def alive(url: str, gw: subprocess.Popen[bytes]) -> None:
    async def answers() -> bool:
        assert gw.poll() is None, "the gateway exited"
        async with httpx.AsyncClient(timeout=10) as http:
            return (await http.get(f"{url}/healthz")).status_code == 200

    await eventually(answers, 60, "the gateway to serve", ignoring=UNREACHABLE)


def one_line_error(response: httpx.Response, error_type: str) -> str:
    error = response.json()["error"]
    assert error["type"] == error_type, response.text
    assert "\n" not in error["message"] and "Traceback" not in error["message"]
    return error["message"]


# --- /healthz and /readyz -----------------------------------------------------------


async def test_healthz_and_readyz_answer_without_a_token(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    env = worker_env(
        client.service_client.config.target_host,
        f"parley-ops-{uuid.uuid4().hex[:8]}",
        payload_store.root,
        TEMPORAL_NAMESPACE=client.namespace,
    )
    with gateway(env, tmp_path, "gateway") as (url, gw):
        await alive(url, gw)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and ready.json() == {"status": "ok"}
            assert (await http.get("/v1/me")).status_code == 401  # the API still needs one
            paths = (await http.get("/openapi.json")).json()["paths"]
        assert paths["/healthz"]["get"]["operationId"] == "healthz"
        readyz = paths["/readyz"]["get"]
        assert readyz["responses"]["503"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"
        }
        assert "security" not in readyz  # no token
        gw.terminate()
        assert await asyncio.to_thread(gw.wait, 120) == 0


async def test_readyz_says_in_one_line_that_temporal_cannot_be_reached_until_it_can(
    payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    """A gateway started before Temporal serves (alive, not ready), and connects once
    Temporal answers."""
    port = free_port()  # nothing listens there yet
    env = worker_env(f"127.0.0.1:{port}", "parley-ops", payload_store.root)
    with gateway(env, tmp_path, "gateway") as (url, gw):
        await alive(url, gw)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            assert (await http.get("/healthz")).status_code == 200
            ready = await http.get("/readyz")
            assert ready.status_code == 503
            line = one_line_error(ready, "Unreachable")
            assert f"cannot reach Temporal at 127.0.0.1:{port}" in line, line
            me = await http.get("/v1/me", headers=AUTH)
            assert me.status_code == 503 and one_line_error(me, "Unreachable") == line
            assert (await http.get("/v1/me")).status_code == 401  # a token first, still

            server = await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal_cli(),
                search_attributes=SEARCH_ATTRIBUTES,
                port=port,
                ui=False,
            )
            try:

                async def ready_now() -> bool:
                    return (await http.get("/readyz")).status_code == 200

                await eventually(ready_now, 120, "the gateway to reach Temporal")
                me = await http.get("/v1/me", headers=AUTH)
                assert me.status_code == 200 and me.json()["user_id"] == "olive", me.text
            finally:
                await server.shutdown()
            ready = await http.get("/readyz")  # Temporal gone again: not ready
            assert ready.status_code == 503
            assert f"Temporal at 127.0.0.1:{port}" in one_line_error(ready, "Unreachable")
        gw.terminate()
        assert await asyncio.to_thread(gw.wait, 120) == 0
    assert "Traceback" not in (tmp_path / "gateway.log").read_text()


# --- SIGTERM drains the gateway -----------------------------------------------------


class Block:
    """One block of a ``text/event-stream``, as sent: its lines up to the blank one."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        self.data: dict[str, Any] | None = json.loads("\n".join(data)) if data else None
        self.type = self.data.get("type") if self.data else None
        ids = [line[3:].strip() for line in lines if line.startswith("id:")]
        self.id = ids[-1] if ids else None
        self.comments = [line for line in lines if line.startswith(":")]


async def read_stream(
    response_of: Callable[[], Any], blocks: list[Block], until: Callable[[Block], bool]
) -> None:
    """Append the stream's blocks to ``blocks`` until ``until(block)`` or its end."""
    async with response_of() as response:
        assert response.status_code == 200, await response.aread()
        lines: list[str] = []
        async for line in response.aiter_lines():
            if line:
                lines.append(line)
                continue
            if lines:
                blocks.append(Block(lines))
                if until(blocks[-1]):
                    return
            lines = []


def run_finished(blocks: list[Block]) -> int:
    return sum(1 for block in blocks if block.type == "RUN_FINISHED")


@asynccontextmanager
async def worker_and_gateways(
    client: Client,
    payload_store: LocalFileStorageDriver,
    home: Path,
    call_id: str,
    grace: str = "3600",
) -> AsyncIterator[tuple[str, subprocess.Popen[bytes], str]]:
    """A ``parley worker`` (its model proposes ``slow_write`` ``call_id``), gateway A
    (by default an hour's grace: only the drain ends its streams) and gateway B."""
    queue = f"parley-ops-{uuid.uuid4().hex[:8]}"
    env = slow_write_worker_env(client, payload_store, home, call_id, queue=queue)
    with (
        process([*PARLEY_MODULE, "worker"], env, home / "worker.log"),
        gateway(env, home, "gateway-a", "--grace-seconds", grace) as (url_a, gw_a),
        gateway(env, home, "gateway-b") as (url_b, gw_b),
    ):
        await alive(url_a, gw_a)
        await alive(url_b, gw_b)
        yield url_a, gw_a, url_b


async def approve_held(
    http: httpx.AsyncClient, url: str, sid: str, call_id: str, home: Path, turn: list[Block]
) -> asyncio.Task[None]:
    """Send a message (the model proposes ``call_id``), hold the tool (``<home>/tool.hold``
    until the test removes it) and approve it with the turn's stream read into ``turn``;
    returns the reading once the tool runs."""
    sent = await http.post(
        f"{url}/v1/conversations/{sid}/messages", json={"text": "write"}, headers=AUTH
    )
    assert sent.json()["status"] == "awaiting_approval", sent.text
    (home / "tool.hold").touch()
    approve = {"decisions": [{"tool_call_id": call_id, "action": "approve"}]}
    decisions = f"{url}/v1/conversations/{sid}/decisions"
    headers = {**AUTH, **SSE}
    reading = asyncio.create_task(
        read_stream(
            lambda: http.stream("POST", decisions, json=approve, headers=headers), turn, no_end
        )
    )
    await eventually(lambda: tool_starts(home / "tool.log"), 60, "the tool to start")
    return reading


async def test_sigterm_drains_the_gateway_and_a_follower_resumes_on_another(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    sid = new_session()
    events = f"/v1/conversations/{sid}/events"
    hold = (tmp_path / "tool.log").with_suffix(".hold")
    on_a: list[Block] = []
    turn: list[Block] = []
    on_b: list[Block] = []
    async with (
        worker_and_gateways(client, payload_store, tmp_path, "d1") as (url_a, gw_a, url_b),
        httpx.AsyncClient(timeout=120) as http,
    ):
        deciding = await approve_held(http, url_a, sid, "d1", tmp_path, turn)
        following = asyncio.create_task(
            read_stream(lambda: http.stream("GET", url_a + events, headers=AUTH), on_a, no_end)
        )
        await eventually(lambda: run_finished(on_a) == 1, 60, "the follower to follow")

        gw_a.terminate()  # SIGTERM, as a deploy or a scale-down sends it
        await asyncio.wait_for(following, 120)  # the follower's stream ends at once
        end = on_a[-1]
        assert end.data is None, end
        assert end.comments[0].startswith(": reconnect: the gateway is stopping"), end
        last_id = [block.id for block in on_a if block.data][-1]
        assert end.id == last_id and f"Last-Event-ID: {last_id}" in end.comments[0], end
        assert "retry: 1000" in end.lines
        # The turn's stream goes on (its tool runs): the gateway waits for it, and takes
        # no new connection meanwhile.
        assert gw_a.poll() is None and not deciding.done()
        # Refused, or (on a busy machine, taken by the kernel's backlog before the
        # listener closed) dropped unanswered: either way no new request is served.
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            await http.get(f"{url_a}/healthz")

        resumed = {**AUTH, "Last-Event-ID": str(end.id)}
        resuming = asyncio.create_task(
            read_stream(
                lambda: http.stream("GET", url_b + events, headers=resumed),
                on_b,
                lambda block: block.type == "RUN_FINISHED",
            )
        )
        hold.unlink()
        await asyncio.wait_for(deciding, 120)
        await asyncio.wait_for(resuming, 120)
        assert await asyncio.to_thread(gw_a.wait, 120) == 0

    # The turn's stream carried its whole run, and ended as a run ends, not drained.
    assert [turn[0].type, turn[-1].type] == ["RUN_STARTED", "RUN_FINISHED"], turn
    assert not any(block.comments for block in turn)
    assert turn[-1].data and turn[-1].data["outcome"]["type"] == "success"
    # The follower: every event once, in order, across the two gateways.
    ids = [int(str(block.id)) for block in on_a + on_b if block.data]  # no gap, no repeat
    assert ids == list(range(len(ids))), f"events lost or repeated: {ids}"
    assert run_finished(on_a + on_b) == 2 and on_b[-1].type == "RUN_FINISHED"
    followed = [block for block in on_a + on_b if block.data]
    assert [block.id for block in turn] == [block.id for block in followed[-len(turn) :]]
    log = (tmp_path / "gateway-a.log").read_text()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log, log


def no_end(_: Block) -> bool:
    return False


async def test_a_turn_that_outlasts_the_grace_period_ends_reconnectable_too(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    """A turn's stream may finish its run while the gateway drains; one whose tool
    outlasts the grace period (``--grace-seconds 12``: the cut comes 5 s before its end)
    ends with the reconnectable end, never cut off, and the process exits 0. The client
    follows the rest of the run on another gateway from its last event id."""
    sid = new_session()
    hold = (tmp_path / "tool.log").with_suffix(".hold")
    turn: list[Block] = []
    rest: list[Block] = []
    async with (
        worker_and_gateways(client, payload_store, tmp_path, "c1", grace="12") as (
            url_a,
            gw_a,
            url_b,
        ),
        httpx.AsyncClient(timeout=120) as http,
    ):
        deciding = await approve_held(http, url_a, sid, "c1", tmp_path, turn)
        gw_a.terminate()
        await asyncio.wait_for(deciding, 120)
        end = turn[-1]
        assert end.data is None and end.comments[0].startswith(": reconnect:"), end
        last_id = [block.id for block in turn if block.data][-1]
        assert end.id == last_id and turn[0].type == "RUN_STARTED", turn
        assert await asyncio.to_thread(gw_a.wait, 120) == 0
        resumed = {**AUTH, "Last-Event-ID": str(end.id)}
        resuming = asyncio.create_task(
            read_stream(
                lambda: http.stream(
                    "GET", f"{url_b}/v1/conversations/{sid}/events", headers=resumed
                ),
                rest,
                lambda block: block.type == "RUN_FINISHED",
            )
        )
        hold.unlink()
        await asyncio.wait_for(resuming, 120)
    ids = [int(str(block.id)) for block in turn + rest if block.data]
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"lost or repeated: {ids}"
    assert rest[-1].data and rest[-1].data["outcome"]["type"] == "success"
    log = (tmp_path / "gateway-a.log").read_text()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log, log


# --- the worker: its grace period and its heartbeat ------------------------------------


def check_worker(health: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARLEY_MODULE, "worker", "--check", "--health-file", str(health)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )


async def test_sigterm_past_the_grace_period_leaves_the_call_to_the_next_worker(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    """``PARLEY_WORKER_GRACE_SECONDS`` bounds how long a stopping worker waits for its
    tools: one still running then is cancelled there and runs on the next worker under
    the same idempotency key; the write happens once. The heartbeat file says the
    worker lives while it runs, and is gone with it."""
    env, conv, tool_log = slow_write_worker(client, payload_store, tmp_path, "g1")
    health = tmp_path / "worker.alive"
    hold = tool_log.with_suffix(".hold")
    hold.touch()  # never let go while worker A runs: only its grace period ends the call
    sid = new_session()
    worker_a = [*PARLEY_MODULE, "worker", "--health-file", str(health)]
    graced = {**env, "PARLEY_WORKER_GRACE_SECONDS": "1"}
    with process(worker_a, graced, tmp_path / "worker-a.log") as first:
        await eventually(conv.workers_polling, 60, "worker A to poll")
        await eventually(health.exists, 60, "worker A's heartbeat")
        healthy = await asyncio.to_thread(check_worker, health)
        assert healthy.returncode == 0, healthy.stderr
        assert (await conv.send(sid, "lee", "write it once")).status == "awaiting_approval"
        deciding = asyncio.create_task(
            conv.decide(sid, "lee", [Decision(tool_call_id="g1", action="approve")])
        )
        await eventually(lambda: tool_starts(tool_log), 60, "the tool to start on worker A")
        first.terminate()
        assert await asyncio.to_thread(first.wait, 120) == 0
    assert "may finish for up to 1 s" in (tmp_path / "worker-a.log").read_text()
    gone = await asyncio.to_thread(check_worker, health)
    assert gone.returncode == 1 and "no worker heartbeat" in gone.stderr, gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1

    hold.unlink()
    with worker_process(env, tmp_path / "worker-b.log"):
        done = await asyncio.wait_for(deciding, 180)
    assert done.status == "completed" and done.reply == "written once", done
    assert_started_twice_done_once(tool_log, f"conversation-{sid}:g1")


def test_the_worker_check_says_in_one_line_what_is_wrong(tmp_path: Path) -> None:
    health = tmp_path / "worker.alive"
    health.write_text(f"{os.getpid()}\n")  # a live process...
    an_hour_ago = time.time() - 3600
    os.utime(health, (an_hour_ago, an_hour_ago))  # ...that stopped beating
    stale = check_worker(health)
    gone_pid = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)
    health.unlink()
    missing = check_worker(health)
    health.write_text(gone_pid.stdout)
    gone = check_worker(health)
    health.write_text(f"{os.getpid()}\n")
    fresh = check_worker(health)
    for result, expected in (
        (missing, "no worker heartbeat at"),
        (stale, "has not beaten for"),
        (gone, f"the worker (pid {gone_pid.stdout.strip()}) that wrote"),
    ):
        assert result.returncode == 1, result
        assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
            result.stderr
        )
        assert "Traceback" not in result.stderr
    assert fresh.returncode == 0, fresh.stderr
    no_file = subprocess.run(
        [*PARLEY_MODULE, "worker", "--check"], capture_output=True, text=True, timeout=120
    )
    assert no_file.returncode == 1 and "--health-file" in no_file.stderr
