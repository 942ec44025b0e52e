"""End to end: what a command prints while other turns run, and when things go away:
real ``parley`` processes, on a pseudo-terminal where it matters, against a real worker
whose model (``Trickle``) streams a word every 0.2 s until the test releases it.

- A command prints only its own turn: a ``send`` refused while a turn streams prints
  nothing on stdout (it printed a fragment of the other turn, 5 times out of 5), and
  names ``--while-busy``; a queued ``send`` and ``chat``'s ``/enqueue`` print their own
  reply, none of the turn they waited behind; an interrupting ``send`` prints from
  where its message joined the turn.
- Ctrl-C in ``send`` mid-stream ends the line and says what became of the message; an
  OTLP collector that is down meanwhile prints nothing into the reply.
- Temporal killed mid-``send``: one line saying so and what became of the message, no
  SDK log line.
- The terminal, tidied: ``audit --verify`` at a terminal with nothing piped in, help
  texts that Rich wraps, ``show``'s multi-line messages.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.client import ConversationRefused, Conversations
from parley.client.connection import core_runtime
from parley.config.settings import Settings
from parley.contracts import SEARCH_ATTRIBUTES
from parley.storage import LocalFileStorageDriver, data_converter
from tests.support import registry
from tests.support.cli import NOWHERE, assert_one_line_error, parley
from tests.support.ports import free_port
from tests.support.processes import (
    LIVENESS_TOOLS,
    PARLEY,
    cli_env,
    worker_env,
    worker_process,
)
from tests.support.streaming_models import Trickle
from tests.support.terminal import CTRL_C, Terminal
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

#: A word of the streaming turn, as the model writes it.
TRICKLE = re.compile(r"trickle\d+")


async def streamed_words(conv: Conversations, sid: str, user: str) -> int:
    events = (await conv.events(sid, user)).events
    return sum(item.event.get("type") == "TEXT_MESSAGE_CONTENT" for item in events)


async def enqueued(conv: Conversations, sid: str, user: str) -> int:
    audit = (await conv.state(sid, user)).audit
    return sum(entry.event == "enqueued" for entry in audit)


async def test_a_command_prints_only_its_own_turn(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    model = Trickle()
    queue = f"parley-own-{uuid.uuid4().hex[:8]}"
    async with parley_worker(registry(), model, task_queue=queue) as conv:
        sid, user = new_session(), "ann"
        env = cli_env(client, payload_store, queue)
        first = asyncio.create_task(conv.send(sid, user, "trickle on"))
        await eventually(
            lambda: streamed_words(conv, sid, user),
            60,
            "the turn streaming",
            ignoring=(ConversationRefused,),  # until the conversation exists
        )
        before = await streamed_words(conv, sid, user)
        chat = Terminal([*PARLEY, "chat", "-s", sid, "-u", user], env)
        try:
            sends = [["send", "-s", sid, "-u", user, f"B{n}"] for n in range(5)]
            refused = await asyncio.gather(*(asyncio.to_thread(parley, env, *a) for a in sends))
            for result in refused:
                assert result.stdout == "", result  # not a word of the turn in flight
                assert_one_line_error(result, "--while-busy enqueue")
                assert "while_busy" not in result.stderr
            assert not first.done() and await streamed_words(conv, sid, user) > before

            await asyncio.to_thread(chat.expect, "you> ")
            chat.type("D\n")
            assert "refused: a turn is still running" in await asyncio.to_thread(
                chat.expect, "/enqueue sends it as the next turn"
            )
            await asyncio.to_thread(chat.expect, "you> ")
            chat.type("/enqueue\n")
            send = ["send", "-s", sid, "-u", user, "--while-busy", "enqueue", "C"]
            queued = asyncio.create_task(asyncio.to_thread(parley, env, *send))

            async def both_queued() -> bool:
                return await enqueued(conv, sid, user) == 2

            await eventually(both_queued, 60, "the chat's and the send's messages queued")
            model.released.append(True)
            await first
            result = await queued
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith("own reply: C"), result.stdout
            assert not TRICKLE.search(result.stdout), result.stdout
            chatted = await asyncio.to_thread(chat.expect, "own reply: D")
            assert not TRICKLE.search(chatted), chatted
            await asyncio.to_thread(chat.expect, "you> ")
            chat.type("/quit\n")
            assert await asyncio.to_thread(chat.wait) == 0

            # An interrupting message's output starts where it joined the turn.
            model.released.clear()
            again = new_session()
            second = asyncio.create_task(conv.send(again, user, "trickle again"))
            await eventually(
                lambda: streamed_words(conv, again, user),
                60,
                "the second turn streaming",
                ignoring=(ConversationRefused,),
            )
            interrupt = ["send", "-s", again, "-u", user, "--while-busy", "interrupt", "E"]
            result = await asyncio.to_thread(parley, env, *interrupt)
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith("own reply: E"), result.stdout
            assert not TRICKLE.search(result.stdout), result.stdout
            assert (await second).reply == "own reply: E"
        finally:
            model.released.append(True)
            chat.close()


async def test_ctrl_c_mid_stream_says_what_became_of_the_message(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    """With an OTLP collector that is down, too: the reply streams for longer than the
    exporter's batch delay (5 s), and none of the exporter's lines reach the terminal."""
    model = Trickle()
    queue = f"parley-own-{uuid.uuid4().hex[:8]}"
    async with parley_worker(registry(), model, task_queue=queue) as conv:
        sid, user = new_session(), "bo"
        env = {
            **cli_env(client, payload_store, queue),
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        }
        send = Terminal([*PARLEY, "send", "-s", sid, "-u", user, "trickle away"], env)
        try:
            await asyncio.to_thread(send.expect, "trickle30")  # past the batch delay
            send.type(CTRL_C)
            assert await asyncio.to_thread(send.wait) == 130
        finally:
            model.released.append(True)
            send.close()
        shown = send.output
        reply, _, said = shown.partition("\ninterrupted; ")
        assert TRICKLE.search(reply) and reply.lstrip().startswith("trickle0"), shown
        assert said.startswith("your message was taken"), shown
        assert f"parley show --session {sid} --user {user}" in said, shown
        for noise in ("Failed to export", "Transient error", "Traceback", "Aborted"):
            assert noise not in shown, shown
        # What the exporter could not do is one line at most, after the command's own.
        exporting = [line for line in shown.splitlines() if "export" in line]
        assert all(line.startswith("warning: traces were not exported") for line in exporting)
        assert len(exporting) <= 1 and not TRICKLE.search(said), shown

        async def rested() -> bool:
            return (await conv.state(sid, user)).status == "idle"

        await eventually(rested, what="the turn to end in Temporal")


async def test_temporal_going_away_mid_send_is_one_line(tmp_path: Path) -> None:
    """The cluster is killed while the reply streams: the command says, in one line,
    that Temporal stopped answering and what became of the message; no SDK log line
    (``WARN temporalio_client::retry``) reaches its terminal."""
    store = LocalFileStorageDriver(tmp_path / "payloads")
    server = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=data_converter(driver=store),
        runtime=core_runtime(quiet=True),
    )
    address = server.client.service_client.config.target_host
    queue = "parley-going-away"
    env = worker_env(
        address,
        queue,
        store.root,
        PARLEY_MODEL="tests.support.streaming_models:trickle",
        PARLEY_TOOLS=LIVENESS_TOOLS,
        PARLEY_TEST_TOOL_LOG=str(tmp_path / "tools.log"),
    )
    try:
        with worker_process(env, tmp_path / "worker.log"):
            conv = Conversations(server.client, Settings(task_queue=queue))
            await eventually(conv.workers_polling, 60, "the worker to poll")
            send = Terminal([*PARLEY, "send", "-s", "gone", "-u", "cy", "trickle on"], env)
            try:
                await asyncio.to_thread(send.expect, "trickle2")
                await server.shutdown()
                code = await asyncio.to_thread(send.wait)
            finally:
                send.close()
    finally:
        await server.shutdown()
    shown = send.output
    assert code == 1, shown
    reply, _, said = shown.partition("\nerror: ")
    assert TRICKLE.search(reply), shown
    assert said.startswith("Temporal stopped answering"), shown
    assert "your message was taken" in said and "parley show --session gone --user cy" in said
    assert said.strip().count("\n") == 0, shown  # one line
    for noise in ("WARN", "temporalio_", "Traceback", "retried"):
        assert noise not in shown, shown


def test_audit_verify_at_a_terminal_says_what_it_reads() -> None:
    verify = Terminal([*PARLEY, "audit", "--verify"], cli_env_nowhere())
    try:
        assert verify.wait() == 1
    finally:
        verify.close()
    assert "error: --verify reads an export: give --file FILE, or pipe one in" in verify.output
    reading = Terminal([*PARLEY, "audit", "--verify", "--file", "-"], cli_env_nowhere())
    try:
        reading.expect("reading the export from standard input; end it with Ctrl-D")
        reading.type("\x04")
        assert reading.wait() == 1
    finally:
        reading.close()


def test_help_is_wrapped_by_rich_never_by_hand() -> None:
    """At 80 columns no option's value list is cut mid-word (``interrup t``), and a
    docstring's paragraphs are wrapped to the terminal, not where the source broke them."""
    for command in ("send", "chat"):
        shown = Terminal([*PARLEY, command, "--help"], cli_env_nowhere(), columns=80)
        try:
            assert shown.wait() == 0
        finally:
            shown.close()
        text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", shown.output).split())
        assert "--while-busy MODE" in text, shown.output
        assert "interrup t" not in shown.output and "interrup\n" not in shown.output
        assert "enqueue or interrupt" in text or "enqueue (the next turn" in text
    lines = [line.rstrip() for line in shown.output.splitlines()]
    assert not any(line.endswith(" because a") for line in lines), shown.output


async def test_show_keeps_a_multi_line_messages_shape(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    queue = f"parley-own-{uuid.uuid4().hex[:8]}"
    async with parley_worker(registry(), Trickle(), task_queue=queue) as conv:
        sid, user = new_session(), "di"
        await conv.send(sid, user, "first line\n  indented second\nthird")
        shown = await asyncio.to_thread(
            parley, cli_env(client, payload_store, queue), "show", "-s", sid, "-u", user
        )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    first = next(line for line in lines if line.endswith("human first line"))
    column = first.index("first line")  # the text starts after the label
    assert f"{' ' * column}  indented second" in lines, shown.stdout
    assert f"{' ' * column}third" in lines, shown.stdout


def cli_env_nowhere() -> dict[str, str]:
    return dict(NOWHERE)
