"""Liveness: a killed worker's tool call is retried within seconds under the same
idempotency key, and with no worker a client call answers in bounded time."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import Decision
from parley.contracts.errors import ErrorType
from parley.storage import LocalFileStorageDriver
from parley.worker.wiring import build_worker
from tests.support import GATE, SLOW_STARTED, call, registry, script
from tests.support.processes import (
    assert_started_twice_done_once,
    slow_write_worker,
    tool_starts,
    worker_process,
)
from tests.support.transcripts import new_session, runs_in, tool_messages
from tests.support.waiting import eventually


async def test_a_worker_killed_during_a_confirm_tool_recovers_within_a_minute(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    env, conv, tool_log = slow_write_worker(client, payload_store, tmp_path, "k1")
    sid = new_session()
    hold = tool_log.with_suffix(".hold")
    hold.touch()

    def starts() -> list[dict]:
        return tool_starts(tool_log)

    with worker_process(env, tmp_path / "worker-a.log") as first:
        await eventually(conv.workers_polling, 60, "worker A to poll")
        turn = await conv.send(sid, "lee", "write it once")
        assert turn.status == "awaiting_approval"
        deciding = asyncio.create_task(
            conv.decide(sid, "lee", [Decision(tool_call_id="k1", action="approve")])
        )

        async def started() -> bool:
            return len(starts()) == 1

        await eventually(started, 60, "the tool to start on worker A")
        first.kill()  # SIGKILL, mid-call
        first.wait(timeout=30)
    hold.unlink()

    restarted = time.monotonic()
    with worker_process(env, tmp_path / "worker-b.log"):
        done = await asyncio.wait_for(deciding, timeout=120)
        took = time.monotonic() - restarted
        state = await conv.state(sid, "lee")
    assert done.status == "completed" and done.reply == "written once", done
    assert took <= 60, f"the turn completed {took:.0f} s after the restart"
    print(f"turn completed {took:.1f} s after the worker restart")

    # It ran again on worker B, under the same idempotency key; the write happened once.
    assert_started_twice_done_once(tool_log, f"conversation-{sid}:k1")
    answers = tool_messages(state.transcript)  # one ToolMessage per call
    assert list(answers) == ["k1"] and answers["k1"].artifact["status"] == "success"


async def test_with_no_worker_send_answers_within_30_s(client: Client) -> None:
    conv = Conversations(client, Settings(task_queue=f"parley-nobody-{uuid.uuid4().hex[:8]}"))
    began = time.monotonic()
    with pytest.raises(ConversationRefused) as refused:
        await conv.send(new_session(), "max", "anyone there?")
    assert time.monotonic() - began <= 30
    assert refused.value.error_type == ErrorType.NO_WORKER
    assert "no worker" in refused.value.message and "--message-id" in refused.value.message


async def test_with_no_worker_approve_answers_within_30_s(client: Client) -> None:
    model = script(
        {"content": "", "tool_calls": [call("write_record", "n1", title="later")]},
        {"content": "written"},
    )
    settings = Settings(task_queue=f"parley-gone-{uuid.uuid4().hex[:8]}")
    conv = Conversations(client, settings)
    sid = new_session()
    async with build_worker(client, settings, registry=registry(), model=model):
        assert (await conv.send(sid, "max", "write it")).status == "awaiting_approval"
    # The worker is gone (it polled a moment ago, so the task queue still lists it).
    began = time.monotonic()
    with pytest.raises(ConversationRefused) as refused:
        await conv.decide(sid, "max", [Decision(tool_call_id="n1", action="approve")])
    assert time.monotonic() - began <= 30
    assert refused.value.error_type == ErrorType.NO_WORKER
    assert "no worker" in refused.value.message and "run the same command" in refused.value.message
    assert runs_in(sid, "write_record") == []

    # Nothing ran and nothing is lost: with a worker back, the decision applies, and the
    # same command again attaches to it (the same decisions, the same update id).
    async with build_worker(client, settings, registry=registry(), model=model):
        done = await conv.decide(sid, "max", [Decision(tool_call_id="n1", action="approve")])
    assert done.status == "completed" and done.reply == "written"
    assert len(runs_in(sid, "write_record")) == 1


async def test_end_works_mid_turn_and_force_works_with_no_worker(parley_worker) -> None:
    """`end` waits for the turn in flight, then answers what is pending; `end --force`
    terminates a conversation no worker serves, and only its owner may."""
    model = script(
        {"content": "", "tool_calls": [call("slow_read", "r1")]},
        {"content": "", "tool_calls": [call("write_record", "w1", title="never")]},
        {"content": "done"},
    )
    GATE.clear()
    SLOW_STARTED.clear()
    sid = new_session()
    async with parley_worker(registry(), model) as conv:
        turn = asyncio.create_task(conv.send(sid, "ned", "read then write"))
        await SLOW_STARTED.wait()  # a tool is running: the turn is in flight
        ending = asyncio.create_task(conv.end(sid, "ned"))
        await asyncio.sleep(0.5)
        assert not ending.done()  # end waits for the turn
        GATE.set()
        assert (await turn).status == "awaiting_approval"
        final = await ending
        assert final.status == "ended"
        answers = tool_messages(final.transcript)
        assert answers["w1"].artifact["status"] == "expired"
        assert runs_in(sid, "write_record") == []

        stuck = new_session()
        # A second conversation left with a pending call (the script starts over).
        assert (await conv.send(stuck, "ned", "read then write")).status == "awaiting_approval"
    # No worker any more: a stranger cannot force, the owner can.
    with pytest.raises(ConversationRefused) as stranger:
        await conv.force_end(stuck, "olga")
    assert stranger.value.error_type == ErrorType.NOT_OWNER
    await conv.force_end(stuck, "ned")
    described = await conv.handle(stuck).describe()
    assert described.status == WorkflowExecutionStatus.TERMINATED


async def test_sigterm_lets_the_running_tool_finish_before_the_worker_exits(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    """A deploy stops a worker with SIGTERM: the tool call it is running finishes there
    (not run again elsewhere), then the worker exits cleanly; the next worker goes on."""
    env, conv, tool_log = slow_write_worker(client, payload_store, tmp_path, "g1")
    sid = new_session()
    hold = tool_log.with_suffix(".hold")
    hold.touch()

    def starts() -> list[dict]:
        return tool_starts(tool_log)

    with worker_process(env, tmp_path / "worker-a.log") as first:
        await eventually(conv.workers_polling, 60, "worker A to poll")
        turn = await conv.send(sid, "lee", "write it once")
        assert turn.status == "awaiting_approval"
        deciding = asyncio.create_task(
            conv.decide(sid, "lee", [Decision(tool_call_id="g1", action="approve")])
        )

        async def started() -> bool:
            return len(starts()) == 1

        await eventually(started, 60, "the tool to start on worker A")
        first.terminate()  # SIGTERM, as a deploy stops it
        await asyncio.sleep(1)
        assert first.poll() is None  # still finishing the running tool
        hold.unlink()
        assert await asyncio.to_thread(first.wait, 40) == 0
    with worker_process(env, tmp_path / "worker-b.log"):
        done = await asyncio.wait_for(deciding, timeout=120)
    assert done.status == "completed" and done.reply == "written once", done
    assert len(starts()) == 1  # it ran once, on worker A
    assert tool_log.with_suffix(".done").read_text().split() == [f"conversation-{sid}:g1"]
