"""End to end: the gateway refuses before it reads, against real ``parley gateway`` and
``parley worker`` processes on a dev server.

- Eight 50 MB bodies with no token answer 401 (or 413) while the client is still
  sending, and the gateway's resident memory grows by less than 50 MB. (Before, each
  was read whole and validated: 422, and RSS went from 126 to 939 MiB.)
- A body over the limit answers 413, whether it declares its length or is chunked.
- A stranger's streaming POST (``Accept: text/event-stream``) and ``/agui`` request on
  someone else's conversation answer 404 in the error shape, before any stream starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from parley.config.settings import Settings
from parley.gateway.guard import BODY_MARGIN_BYTES, max_body_bytes
from parley.storage import LocalFileStorageDriver
from tests.support.gateway import (
    ALICE_TOKEN,
    BOB_TOKEN,
    TOKENS,
    GatewayProcess,
    auth,
    gateway_processes,
)

ALICE = auth(ALICE_TOKEN)
BOB = auth(BOB_TOKEN)
MB = 1024 * 1024
#: The limit the gateway process is started with (PARLEY_GATEWAY_MAX_BODY_BYTES).
LIMIT = 3 * MB


@pytest.fixture(scope="module")
def gateway(
    isolated_temporal_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("edges")
    with gateway_processes(
        isolated_temporal_env.client,
        payload_store,
        home,
        TOKENS,
        PARLEY_GATEWAY_MAX_BODY_BYTES=str(LIMIT),
    ) as running:
        yield running
    assert "Traceback" not in running.log(), running.log()[-3000:]


@dataclass
class Answer:
    status: int
    body: dict
    seconds: float


async def post_big(
    url: str,
    path: str,
    headers: dict[str, str],
    *,
    chunked: bool = False,
    before_answer: int = MB,
    size: int = 50 * MB,
) -> Answer:
    """POST a ``size``-byte body to ``path`` over a raw connection: send its first
    ``before_answer`` bytes, wait for the answer (which must come without the rest),
    then send the rest anyway, as a client that does not listen would."""
    where = urlsplit(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n{head}\r\n".encode()
    )
    piece = b'{"text": "' + b"a" * (256 * 1024 - 10)
    sent = 0

    async def send(up_to: int) -> None:
        nonlocal sent
        while sent < up_to:
            chunk = piece[: up_to - sent]
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk)
            await writer.drain()
            sent += len(chunk)

    async def read_answer() -> tuple[int, dict]:
        status_line = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return int(status_line.split()[1]), json.loads(await reader.readexactly(length))

    started = time.monotonic()
    try:
        await send(before_answer)
        status, body = await asyncio.wait_for(read_answer(), timeout=15)
        seconds = time.monotonic() - started
        with contextlib.suppress(ConnectionError):
            await send(size)
            if chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
    finally:
        writer.close()
    return Answer(status, body, seconds)


async def test_big_bodies_are_refused_before_they_are_read(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        # Warm: the routes have answered once, so their imports are not counted.
        assert (await http.get("/v1/me", headers=ALICE)).status_code == 200
        answered = await http.post("/v1/conversations/x/messages", json={"text": 5}, headers=ALICE)
        assert answered.status_code == 422
    rss_before = gateway.rss_bytes()

    sid = f"edges-{uuid.uuid4().hex[:8]}"
    targets = [f"/v1/conversations/{sid}/messages", f"/v1/conversations/{sid}/decisions", "/agui"]
    wrong_token = {"Authorization": "Bearer " + "x" * 20}
    no_token = [
        post_big(gateway.url, targets[n % 3], {} if n < 6 else wrong_token, chunked=n % 2 == 1)
        for n in range(8)
    ]
    answers = await asyncio.gather(*no_token)
    for answer in answers:
        assert answer.status in (401, 413), answer
        assert answer.body["error"]["type"] in ("Unauthenticated", "RequestTooLarge")
        assert answer.body["error"]["message"]
        assert answer.seconds < 10, answer.seconds
    assert {a.status for a in answers} == {401}

    # With a token: a declared length over the limit is refused at once, and a chunked
    # body as soon as it passes the limit.
    declared, streamed = await asyncio.gather(
        post_big(gateway.url, targets[0], ALICE),
        post_big(gateway.url, targets[1], ALICE, chunked=True, before_answer=LIMIT + MB),
    )
    for answer in (declared, streamed):
        assert answer.status == 413, answer
        assert answer.body["error"]["type"] == "RequestTooLarge"
        assert str(LIMIT) in answer.body["error"]["message"]

    grown = gateway.rss_bytes() - rss_before
    print(
        f"edges: 10 bodies of 50 MB refused; slowest answer "
        f"{max(a.seconds for a in [*answers, declared, streamed]):.2f} s; "
        f"gateway RSS grew {grown / MB:.1f} MB"
    )
    assert grown < 50 * MB


async def test_a_body_under_the_limit_is_read_and_one_over_is_refused(
    gateway: GatewayProcess,
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        sid = f"edges-{uuid.uuid4().hex[:8]}"
        # Under the gateway's limit, over the conversation's message limit (1 MiB).
        answer = await http.post(
            f"/v1/conversations/{sid}/messages", json={"text": "x" * (2 * MB)}, headers=ALICE
        )
        assert answer.status_code == 413
        assert answer.json()["error"]["type"] != "RequestTooLarge"
        answer = await http.post(
            f"/v1/conversations/{sid}/messages", json={"text": "x" * LIMIT}, headers=ALICE
        )
        assert answer.status_code == 413
        assert answer.json()["error"]["type"] == "RequestTooLarge"


async def test_a_stranger_gets_404_before_any_stream_starts(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        sid = f"edges-{uuid.uuid4().hex[:8]}"
        sent = await http.post(
            f"/v1/conversations/{sid}/messages", json={"text": "write it"}, headers=ALICE
        )
        assert sent.json()["status"] == "awaiting_approval", sent.text
        streaming = {**BOB, "Accept": "text/event-stream"}
        requests = [
            (f"/v1/conversations/{sid}/messages", {"text": "hello"}),
            (
                f"/v1/conversations/{sid}/decisions",
                {"decisions": [{"tool_call_id": "f1", "action": "approve"}]},
            ),
            (
                "/agui",
                {
                    "threadId": sid,
                    "runId": "r1",
                    "messages": [{"id": "b1", "role": "user", "content": "hello"}],
                },
            ),
            (
                "/agui",
                {
                    "threadId": sid,
                    "runId": "r2",
                    "messages": [],
                    "resume": [{"interruptId": "f1", "status": "resolved", "payload": True}],
                },
            ),
        ]
        for path, body in requests:
            answer = await http.post(path, json=body, headers=streaming)
            assert answer.status_code == 404, (path, answer.status_code, answer.text)
            assert answer.headers["content-type"] == "application/json"
            assert answer.json() == {
                "error": {"type": "NotFound", "message": f"conversation {sid} not found"}
            }
        state = await http.get(f"/v1/conversations/{sid}", headers=ALICE)
        assert [c["tool_call_id"] for c in state.json()["pending"]] == ["f1"]


def test_the_body_limit_setting() -> None:
    assert max_body_bytes(Settings()) == Settings().max_message_bytes + BODY_MARGIN_BYTES
    assert max_body_bytes(Settings(max_message_bytes=10)) == 10 + BODY_MARGIN_BYTES
    assert max_body_bytes(Settings(gateway_max_body_bytes=1234)) == 1234
