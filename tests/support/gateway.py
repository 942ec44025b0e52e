"""Running the real gateway for a test: uvicorn on 127.0.0.1, a free port, the test's
own worker and Temporal client (``serve_gateway``); or real ``parley worker`` and
``parley gateway`` processes on a dev server whose metrics the test reads
(``metered_dev_server``, ``gateway_processes``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.client import Conversations
from parley.contracts import SEARCH_ATTRIBUTES, workflow_id_for
from parley.gateway.access import TokenTable
from parley.gateway.server import serving
from parley.storage import LocalFileStorageDriver, data_converter
from tests.support.ports import free_port
from tests.support.processes import PARLEY_MODULE, process, slow_write_worker_env

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789ab"
TOKENS = {ALICE_TOKEN: "alice", BOB_TOKEN: "bob"}


@contextlib.asynccontextmanager
async def serve_gateway(
    conversations: Conversations, tokens: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """The gateway app on ``http://127.0.0.1:<free port>``; ``tokens`` maps token to
    user id (by default alice's and bob's)."""
    async with serving(conversations, TokenTable(tokens or TOKENS), "127.0.0.1", 0) as url:
        yield url


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class SseEvent:
    def __init__(self, event_id: str | None, data: dict) -> None:
        self.id = event_id
        self.data = data
        self.type = data.get("type")

    def __repr__(self) -> str:
        return f"SseEvent({self.id}, {self.type})"


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Parse a ``text/event-stream`` body: one event per blank-line-ended block."""
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield SseEvent(event_id, json.loads("\n".join(data)))
            event_id, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


class EventReader:
    """One stream's events, read on across calls (a stream is iterated only once)."""

    def __init__(self, response: httpx.Response) -> None:
        self._events = sse_events(response)

    async def until(
        self, done: Callable[[list[SseEvent]], bool], seconds: float = 30
    ) -> list[SseEvent]:
        seen: list[SseEvent] = []

        async def read() -> None:
            async for event in self._events:
                seen.append(event)
                if done(seen):
                    return

        await asyncio.wait_for(read(), timeout=seconds)
        return seen


async def collect_until(
    response: httpx.Response, done: Callable[[list[SseEvent]], bool], seconds: float = 30
) -> list[SseEvent]:
    """Events of a stream until ``done(events)`` holds (or the stream ends)."""
    seen: list[SseEvent] = []

    async def read() -> None:
        async for event in sse_events(response):
            seen.append(event)
            if done(seen):
                return

    await asyncio.wait_for(read(), timeout=seconds)
    return seen


# --- real processes ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def metered_dev_server(
    payload_store: LocalFileStorageDriver, metrics_port: int
) -> AsyncIterator[WorkflowEnvironment]:
    """A dev server like the shared one (``conftest.dev_server``) that serves its
    Prometheus metrics on ``metrics_port``: how many queries it answered."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=data_converter(driver=payload_store),
        dev_server_extra_args=["--metrics-port", str(metrics_port)],
    )
    try:
        yield env
    finally:
        await env.shutdown()


async def queries_answered(metrics_port: int) -> int:
    """``QueryWorkflow`` requests the dev server's frontend has answered so far."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
    found = re.search(
        r'^service_latency_count\{[^}]*operation="QueryWorkflow"[^}]*'
        r'service_name="frontend"[^}]*\} (\S+)$',
        text,
        re.MULTILINE,
    )
    return int(float(found.group(1))) if found else 0


@dataclass
class GatewayProcess:
    url: str
    pid: int
    home: Path

    def rss_bytes(self) -> int:
        """The gateway process's resident memory (``VmRSS``)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        kib = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
        assert kib, status
        return int(kib.group(1)) * 1024

    def log(self) -> str:
        return (self.home / "gateway.log").read_text(errors="replace")


@contextlib.contextmanager
def gateway_processes(
    client: Client,
    payload_store: LocalFileStorageDriver,
    home: Path,
    tokens: dict[str, str],
    call_id: str = "f1",
    **env: str,
) -> Iterator[GatewayProcess]:
    """A real ``parley worker`` process (its model proposes ``slow_write`` ``call_id``,
    then answers "written") and a real ``parley gateway`` process with ``tokens``
    (token to user id), on ``client``'s server. ``env`` adds variables to both."""
    (home / "tokens").write_text("".join(f"{user} {token}\n" for token, user in tokens.items()))
    port = free_port()
    queue = f"parley-gw-{uuid.uuid4().hex[:8]}"
    environment = {
        **slow_write_worker_env(client, payload_store, home, call_id, queue=queue),
        "PARLEY_GATEWAY_TOKENS_FILE": str(home / "tokens"),
        "PARLEY_GATEWAY_PORT": str(port),
        **env,
    }
    with (
        process([*PARLEY_MODULE, "worker"], environment, home / "worker.log"),
        process([*PARLEY_MODULE, "gateway"], environment, home / "gateway.log") as gateway,
    ):
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert gateway.poll() is None, (home / "gateway.log").read_text()
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.2)
        yield GatewayProcess(url=url, pid=gateway.pid, home=home)


async def run_history(client: Client, session_id: str) -> list[Any]:
    """The events of the conversation's current run."""
    handle = client.get_workflow_handle(workflow_id_for(session_id))
    return [event async for event in handle.fetch_history_events()]


def updates_accepted(history: list[Any]) -> int:
    """How many updates the run has accepted: Temporal allows a run 2,000 in all."""
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return sum(1 for event in history if event.event_type == accepted)
