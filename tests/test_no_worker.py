"""'No worker' means no worker: a backlog behind a live worker is waited out, however
busy the machine, while a task queue nobody polls and a worker killed are told "no
worker"; a decision given while no worker runs is kept (sent as the ``decide_signal``
signal) and applied once when one returns. Real dev server, real worker (in-process, or
a ``parley worker`` process whose log is read), a real CPU hog (busy processes)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path

import pytest
from temporalio.client import Client

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts.errors import ErrorType
from parley.storage import LocalFileStorageDriver
from parley.worker.wiring import build_worker
from tests.support import call, registry, script
from tests.support.load import BURST_TOOLS, cpu_hog, write_burst_script
from tests.support.processes import LIVENESS_TOOLS, PARLEY_MODULE, ROOT, cli_env, process
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

COLD_CONVERSATIONS = 100
#: A burst that once had "no worker" said behind a live one: conversations, messages
#: each (one after the other), tool calls per message.
BURST = (100, 3, 2)


async def test_100_cold_conversations_to_one_worker_get_no_no_worker_answer(
    client: Client,
    payload_store: LocalFileStorageDriver,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """100 new conversations send at once to one ``parley worker`` process: each one's
    first workflow task waits in a backlog behind the live worker, which is no reason
    to say "no worker". The worker's log holds no unretrieved future or traceback."""
    queue = f"parley-cold-{uuid.uuid4().hex[:8]}"
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps([{"content": "hello"}]))
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{script_file}",
        "PARLEY_TOOLS": LIVENESS_TOOLS,
        "PARLEY_TEST_TOOL_LOG": str(tmp_path / "tool.log"),
        # Two workflow tasks at a time: the 100 first tasks queue for many seconds.
        "PARLEY_MAX_CONCURRENT_WORKFLOW_TASKS": "2",
    }
    log = tmp_path / "worker.log"
    # The client looks at the queue every second, so every task that waits is judged.
    conv = Conversations(client, Settings(task_queue=queue, worker_wait_seconds=1))
    with process([*PARLEY_MODULE, "worker"], env, log):
        await eventually(conv.workers_polling, 60, "the worker to poll")

        async def send(n: int) -> str:
            try:
                turn = await conv.send(new_session(), "cora", f"hello {n}")
            except ConversationRefused as refused:
                return refused.error_type or "refused"
            return turn.reply or turn.status

        began = time.monotonic()
        answers = Counter(await asyncio.gather(*(send(n) for n in range(COLD_CONVERSATIONS))))
        took = time.monotonic() - began
    queued = sum("is queued" in record.getMessage() for record in caplog.records)
    print(
        f"{COLD_CONVERSATIONS} cold conversations answered in {took:.1f} s: {dict(answers)}; "
        f"{queued} said they were queued"
    )
    # The backlog was real (calls were judged while queued), and never called "no worker".
    assert queued > 0, "no call waited long enough to be judged: the test proves nothing"
    assert answers[ErrorType.NO_WORKER] == 0, answers
    assert answers == Counter({"hello": COLD_CONVERSATIONS}), answers
    text = log.read_text(errors="replace")
    assert "Future exception was never retrieved" not in text, text[-4000:]
    assert "Traceback" not in text, text[-4000:]


async def test_approve_with_no_worker_is_kept_and_applies_once_when_a_worker_starts(
    client: Client, payload_store: LocalFileStorageDriver
) -> None:
    """The worker stops with a call pending. `parley approve` answers within 30 s with
    one line saying the decision is kept; a worker started later applies it: the tool
    runs exactly once and the turn completes."""
    model = script(
        {"content": "", "tool_calls": [call("write_record", "k1", title="later")]},
        {"content": "written"},
    )
    settings = Settings(task_queue=f"parley-kept-{uuid.uuid4().hex[:8]}")
    conv = Conversations(client, settings)
    sid = new_session()
    async with build_worker(client, settings, registry=registry(), model=model):
        assert (await conv.send(sid, "max", "write it")).status == "awaiting_approval"
    # The worker is gone; it polled a moment ago, so the task queue still lists it.

    began = time.monotonic()
    approve = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "parley.cli", "approve", "-s", sid, "-u", "max", "k1"],
        cwd=ROOT,
        env=cli_env(client, payload_store, settings.task_queue),
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - began
    print(f"approve with no worker answered in {took:.1f} s")
    assert took <= 30, f"approve answered after {took:.0f} s"
    lines = approve.stderr.strip().splitlines()
    assert approve.returncode == 1 and len(lines) == 1, approve.stderr
    assert "no worker" in lines[0] and "decision is kept" in lines[0], lines[0]
    assert "Traceback" not in approve.stderr and "poller" not in lines[0]
    assert runs_in(sid, "write_record") == []

    async with build_worker(client, settings, registry=registry(), model=model):

        async def completed():  # type: ignore[no-untyped-def]
            state = await conv.state(sid, "max")
            return state if state.status == "idle" and not state.pending else None

        state = await eventually(completed, 60, "the kept decision to apply")
    assert len(runs_in(sid, "write_record")) == 1
    assert state.transcript[-1].content == "written"
    decided = [e for e in state.audit if e.event == "decided"]
    assert len(decided) == 1 and decided[0].actor == "max", state.audit


async def test_with_no_worker_reading_answers_in_one_line_within_the_bound(
    client: Client,
) -> None:
    """With its worker gone, `show` (the state query) and the events query answer
    within the bound with one line that says what visibility knows; a stranger learns
    nothing."""
    model = script(
        {"content": "", "tool_calls": [call("write_record", "q1", title="queued")]},
        {"content": "written"},
    )
    settings = Settings(task_queue=f"parley-none-{uuid.uuid4().hex[:8]}")
    conv = Conversations(client, settings)
    sid = new_session()
    async with build_worker(client, settings, registry=registry(), model=model):
        assert (await conv.send(sid, "nia", "write it")).status == "awaiting_approval"

    began = time.monotonic()
    with_no_worker = await asyncio.gather(
        conv.state(sid, "nia"), conv.events(sid, "nia"), return_exceptions=True
    )
    assert time.monotonic() - began <= 2 * settings.worker_wait_seconds + 5
    for refused in with_no_worker:
        assert isinstance(refused, ConversationRefused), refused
        assert refused.error_type == ErrorType.NO_WORKER, refused.message
    assert (
        "awaiting_approval (write_record pending); a decision on q1 is kept"
        in with_no_worker[0].message
    ), with_no_worker[0].message
    with_stranger = await asyncio.gather(conv.state(sid, "zed"), return_exceptions=True)
    assert isinstance(with_stranger[0], ConversationRefused)
    assert with_stranger[0].error_type == ErrorType.NOT_OWNER


async def test_a_send_given_up_for_no_worker_leaves_no_unretrieved_future(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The liveness watch cancels an update-with-start no worker takes; the start
    operation's outcome is read too, so nothing logs "Future exception was never
    retrieved" later (the tracebacks seen under load)."""
    conv = Conversations(
        client, Settings(task_queue=f"parley-nobody-{uuid.uuid4().hex[:8]}", worker_wait_seconds=1)
    )
    for _ in range(3):
        with pytest.raises(ConversationRefused) as refused:
            await conv.send(new_session(), "max", "anyone there?")
        assert refused.value.error_type == ErrorType.NO_WORKER
    gc.collect()
    await asyncio.sleep(0.1)
    assert "never retrieved" not in caplog.text, caplog.text


@pytest.mark.parametrize("load", ["quiet", "cpu_hog"])
async def test_a_burst_of_100_conversations_of_3_messages_gets_no_no_worker_answer(
    client: Client,
    payload_store: LocalFileStorageDriver,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    load: str,
) -> None:
    """100 new conversations send 3 messages each (one after the other; 2 auto tool
    calls per message) at once to one ``parley worker`` process, on a quiet machine and
    with both cores saturated by busy processes. The worker is alive and polling
    throughout: no call is told "no worker", every message gets its reply, though many
    calls wait long enough to be judged (every 2 s, under the hog too: a burst that
    takes 17 s there left no call waiting 5 s), and are said to be queued."""
    conversations, messages, calls = BURST
    queue = f"parley-burst-{uuid.uuid4().hex[:8]}"
    replies = write_burst_script(tmp_path / "script.json", messages, calls)
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{tmp_path / 'script.json'}",
        "PARLEY_TOOLS": BURST_TOOLS,
    }
    log = tmp_path / "worker.log"
    conv = Conversations(client, Settings(task_queue=queue, worker_wait_seconds=2))

    async def converse(n: int) -> list[str]:
        sid = new_session()
        answers = []
        for m in range(messages):
            try:
                turn = await conv.send(sid, "cora", f"message {m} of {n}")
            except ConversationRefused as refused:
                answers.append(refused.error_type or "refused")
            else:
                answers.append(turn.reply or turn.status)
        return answers

    with process([*PARLEY_MODULE, "worker"], env, log):
        await eventually(conv.workers_polling, 60, "the worker to poll")
        with cpu_hog(2) if load == "cpu_hog" else contextlib.nullcontext():
            began = time.monotonic()
            answers = await asyncio.gather(*(converse(n) for n in range(conversations)))
            took = time.monotonic() - began
    counts = Counter(answer for each in answers for answer in each)
    queued = sum("is queued" in record.getMessage() for record in caplog.records)
    print(
        f"{conversations} conversations x {messages} messages ({load}) answered in "
        f"{took:.1f} s: {dict(counts)}; {queued} calls said they were queued"
    )
    assert counts[ErrorType.NO_WORKER] == 0, counts
    assert all(each == replies for each in answers), counts
    # The calls were judged while the worker was busy: the test is not vacuous.
    assert queued > 0, "no call waited long enough to be judged: the test proves nothing"
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]


async def test_a_task_queue_nobody_polls_is_no_worker(client: Client) -> None:
    """No worker has ever polled the task queue: Temporal lists no poller, so a new
    conversation's message and a query are told "no worker" (at the first look)."""
    conv = Conversations(
        client, Settings(task_queue=f"parley-empty-{uuid.uuid4().hex[:8]}", worker_wait_seconds=1)
    )
    assert not await conv.workers_polling()
    sid = new_session()
    with pytest.raises(ConversationRefused) as refused:
        await conv.send(sid, "max", "anyone there?")
    assert refused.value.error_type == ErrorType.NO_WORKER
    assert "no worker is serving task queue" in refused.value.message
    with pytest.raises(ConversationRefused) as unread:
        await conv.state(sid, "max")
    assert unread.value.error_type == ErrorType.NO_WORKER, unread.value.message


async def test_a_worker_killed_is_noticed_though_temporal_still_lists_it(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    """A ``parley worker`` process is SIGKILLed after a turn. Temporal still lists its
    poller, as polling a moment ago, yet the next message to its conversation, a new
    conversation's first message and ``show`` are each told "no worker": their workflow
    task (or query) waits and no worker polls any queue of the task queue meanwhile."""
    queue = f"parley-killed-{uuid.uuid4().hex[:8]}"
    replies = write_burst_script(tmp_path / "script.json", 2, 1)
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_MODEL": f"script:{tmp_path / 'script.json'}",
        "PARLEY_TOOLS": BURST_TOOLS,
    }
    conv = Conversations(client, Settings(task_queue=queue, worker_wait_seconds=2))
    sid = new_session()
    with process([*PARLEY_MODULE, "worker"], env, tmp_path / "worker.log") as worker:
        await eventually(conv.workers_polling, 60, "the worker to poll")
        assert (await conv.send(sid, "ada", "first")).reply == replies[0]
        worker.kill()  # SIGKILL: no goodbye to Temporal
        worker.wait(timeout=30)
    # The dead worker is still listed, polling lately: the hard case, not an empty queue.
    assert await conv.workers_polling()

    async def timed(call: Awaitable[object]) -> tuple[object, float]:
        began = time.monotonic()
        try:
            return await call, time.monotonic() - began
        except ConversationRefused as refused:
            return refused, time.monotonic() - began

    answers = await asyncio.gather(
        timed(conv.send(sid, "ada", "second")),
        timed(conv.send(new_session(), "ada", "hello")),
        timed(conv.state(sid, "ada")),
    )
    print("after SIGKILL: " + ", ".join(f"{type(a).__name__} in {t:.1f} s" for a, t in answers))
    for answer, _ in answers:
        assert isinstance(answer, ConversationRefused), answer
        assert answer.error_type == ErrorType.NO_WORKER, answer.message
