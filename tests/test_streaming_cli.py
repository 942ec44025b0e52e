"""The CLI renders the reply as it streams (issue 21, point 1): real ``parley send`` and
``parley chat`` processes against a real worker whose provider (the OpenAI protocol,
tests.support.openai_fake) writes 30 words at 100 ms each.

What must hold: the reply's text is on the command's standard output before the
provider wrote its last word, the whole reply is printed once (not again with the
turn's result), and the process ends as it did before streaming.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator

import pytest

from parley.client import Conversations
from tests.support import registry
from tests.support.cli import assert_one_line_error
from tests.support.openai_env import THIRTY_WORDS, openai_model, serving_openai, stored_reply
from tests.support.openai_fake import FakeOpenAI
from tests.support.processes import PARLEY
from tests.support.scripts import script
from tests.support.transcripts import new_session


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    async with serving_openai(monkeypatch, "sk-streaming-surface-0000") as running:
        yield running


async def run_reading(
    conversations: Conversations, client, args: list[str], stdin: str = ""
) -> tuple[int, list[tuple[float, str]]]:
    """Run ``parley ARGS`` against the test's Temporal server and worker; its standard
    output as it came, each piece with the ``time.monotonic()`` it was read at."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        "COLUMNS": "400",
    }
    cli = await asyncio.create_subprocess_exec(
        *PARLEY,
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert cli.stdin and cli.stdout and cli.stderr
    cli.stdin.write(stdin.encode())
    await cli.stdin.drain()
    cli.stdin.close()
    pieces: list[tuple[float, str]] = []
    async with asyncio.timeout(120):
        while chunk := await cli.stdout.read(4096):
            pieces.append((time.monotonic(), chunk.decode()))
        errors = await cli.stderr.read()
        code = await cli.wait()
    assert not errors.strip() or code != 0, errors
    return code, pieces


def first_seen(pieces: list[tuple[float, str]], text: str) -> float:
    """When ``text`` was first whole on standard output."""
    so_far = ""
    for at, piece in pieces:
        so_far += piece
        if text in so_far:
            return at
    raise AssertionError(f"{text!r} never printed: {so_far!r}")


async def test_send_prints_the_reply_as_it_streams(parley_worker, client, fake) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.1)
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        code, pieces = await run_reading(
            conversations, client, ["send", "--session", sid, "--user", "alice", "talk to me"]
        )
        snapshot = await conversations.state(sid, "alice")

    (provider,) = fake.streams
    printed = "".join(piece for _, piece in pieces)
    assert code == 0, printed
    assert first_seen(pieces, "word0") < provider.delta_times[-1], printed
    assert len(pieces) >= 5, "the reply came in one piece"
    assert stored_reply(snapshot).content == THIRTY_WORDS
    assert printed.count(THIRTY_WORDS) == 1, printed  # streamed, not printed again


async def test_chat_prints_the_reply_as_it_streams(parley_worker, client, fake) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.1)
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        code, pieces = await run_reading(
            conversations,
            client,
            ["chat", "--session", sid, "--user", "alice"],
            stdin="talk to me\n/quit\n",
        )

    (provider,) = fake.streams
    printed = "".join(piece for _, piece in pieces)
    assert code == 0, printed
    assert first_seen(pieces, "word0") < provider.delta_times[-1], printed
    assert len(pieces) >= 5, "the reply came in one piece"
    assert printed.count(THIRTY_WORDS) == 1, printed


async def test_send_with_no_worker_says_what_the_send_says(parley_worker, client) -> None:
    """Following the stream needs the event log's offset first; with no worker to
    answer, the send goes on alone and its own line says what became of the message."""
    sid = new_session()
    async with parley_worker(registry(), script({"content": "hello"})) as conversations:
        await conversations.send(sid, "alice", "hi")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        "PARLEY_WORKER_WAIT_SECONDS": "2",
    }
    args = [*PARLEY, "send", "--session", sid, "--user", "alice", "--message-id", "m-1", "again"]
    result = await asyncio.to_thread(
        subprocess.run, args, env=env, capture_output=True, text=True, timeout=60
    )
    assert_one_line_error(result, "no worker is serving task queue")
    assert "send it again with --message-id m-1" in result.stderr, result.stderr
