"""End to end: the CLI renders the reply as it streams: real ``parley send`` and
``parley chat`` processes against a real worker whose provider (the OpenAI protocol,
tests.support.openai_fake) writes 30 words at 100 ms each.

What must hold: the reply's text is on the command's standard output before the
provider wrote its last word, the whole reply is printed once (not again with the
turn's result), and the process ends as it did before streaming.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import time

import pytest

from parley.cli.live_reply import YOUNGEST_CANCEL_SECONDS, LiveReply, send_following
from parley.client import Conversations
from parley.contracts import TurnResult
from tests.support import registry
from tests.support.cli import assert_one_line_error
from tests.support.openai_env import THIRTY_WORDS, openai_model, stored_reply
from tests.support.processes import PARLEY
from tests.support.scripts import script
from tests.support.transcripts import new_session


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


class RecordedWaits(Conversations):
    """The real client, recording each ``wait_for_events``: its ``after``, when it was
    sent, and when it was cancelled (None: it came back)."""

    def __init__(self, conversations: Conversations) -> None:
        super().__init__(conversations._client, conversations.settings)
        self.waits: list[dict] = []

    async def wait_for_events(self, session_id: str, user_id: str, after: int) -> int:
        wait = {"after": after, "sent": time.monotonic(), "cancelled": None}
        self.waits.append(wait)
        try:
            return await super().wait_for_events(session_id, user_id, after)
        except asyncio.CancelledError:
            wait["cancelled"] = time.monotonic()
            raise


@pytest.mark.parametrize("late", [0.0, 0.3, 0.8])
async def test_a_followed_send_cancels_no_wait_temporal_is_still_taking(
    parley_worker, fake, late: float
) -> None:
    """A wait cancelled while Temporal is still loading the conversation is an error line
    in the server's log ("context canceled", which `parley dev`'s console showed when
    the CLI's follower was cancelled as its send answered). Whenever the turn's answer
    reaches the CLI (``late`` seconds after the update answered, as on a loaded
    machine), the follower sends no wait after it, lets a wait its events answer come
    back, and cancels only a wait no event would answer, and only once it is a second
    old; the reply is still printed once, whole."""
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        recorded = RecordedWaits(conversations)
        for n in range(4):
            fake.reply(f"reply {n}: {THIRTY_WORDS}", chunk_delay=0.01)
            answered: list[float] = []

            async def send(n: int = n, answered: list[float] = answered) -> TurnResult:
                result = await recorded.send(sid, "alice", f"message {n}")
                await asyncio.sleep(late)
                answered.append(time.monotonic())
                return result

            before = len(recorded.waits)
            out = io.StringIO()
            result = await send_following(recorded, sid, "alice", send, LiveReply(out))
            assert result.reply and out.getvalue().count(result.reply) == 1, out.getvalue()
            latest = (await recorded.events(sid, "alice", limit=1)).latest
            waits = recorded.waits[before:]
            assert waits, "the send was not followed"
            assert all(wait["sent"] <= answered[0] for wait in waits), waits
            for wait in waits:
                if wait["cancelled"] is not None:
                    assert wait["after"] >= latest, (latest, wait)
                    assert wait["cancelled"] - wait["sent"] >= YOUNGEST_CANCEL_SECONDS, wait


class WaitBackWhileStopReads(RecordedWaits):
    """The in-flight wait comes back (as a refusal does when the conversation ends)
    while ``stop`` is reading the log's latest offset: the race CI met, where ``stop``
    read the wait it had just checked and found it gone."""

    def __init__(self, conversations: Conversations) -> None:
        super().__init__(conversations)
        self.armed = False
        self.came_back = asyncio.Event()
        self._release = asyncio.Event()

    async def events(self, session_id: str, user_id: str, after: int = -1, limit: int = 500):
        if self.armed and limit == 1:
            self._release.set()
            await self.came_back.wait()
        return await super().events(session_id, user_id, after, limit)

    async def wait_for_events(self, session_id: str, user_id: str, after: int) -> int:
        real = asyncio.ensure_future(super().wait_for_events(session_id, user_id, after))
        released = asyncio.ensure_future(self._release.wait())
        try:
            await asyncio.wait({real, released}, return_when=asyncio.FIRST_COMPLETED)
            if real.done():
                return real.result()
            return after
        finally:
            real.cancel()
            released.cancel()
            if self._release.is_set():
                self.came_back.set()


async def test_a_wait_that_comes_back_while_the_follower_stops_is_no_traceback(
    parley_worker, fake
) -> None:
    """The send answers while a wait is in flight past the last event; the wait comes
    back while ``stop`` reads the log. ``send_following`` returns the turn's result and
    the reply once."""
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        spy = WaitBackWhileStopReads(conversations)
        fake.reply(f"reply: {THIRTY_WORDS}", chunk_delay=0.01)

        async def send() -> TurnResult:
            result = await spy.send(sid, "alice", "hello")
            await asyncio.sleep(1.5)  # well past the pause after the turn end: a wait is sent
            spy.armed = True
            return result

        out = io.StringIO()
        result = await send_following(spy, sid, "alice", send, LiveReply(out))
        assert spy.came_back.is_set(), "the race was not staged"
        assert result.reply and out.getvalue().count(result.reply) == 1, out.getvalue()
