"""Safe deploys: two worker builds, the second with a changed workflow.

Build ``v1`` is this checkout; build ``v2`` is a copy of it whose workflow starts every
run with a timer (an incompatible change: a ``v1`` history replayed on ``v2`` code
would fail). Both run as real ``parley worker`` processes, with Worker Versioning on.
``parley deploy v2`` makes ``v2`` current while one conversation waits for approval and
another is in the middle of an approved tool call on ``v1``:

- the waiting one moves to ``v2`` at once, its pending call intact, and is approved
  and finished there;
- the busy one finishes its turn on ``v1``, then moves;
- a new conversation starts on ``v2``;
- the runs ``v1`` completed still replay with ``v1``'s code, and every call ran once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import Decision
from parley.contracts.names import workflow_id_for
from parley.storage import LocalFileStorageDriver
from parley.worker.deploys import current_build, describe
from parley.workflows.conversation import ConversationWorkflow
from tests.support.processes import (
    LIVENESS_TOOLS,
    ROOT,
    cli_env,
    tool_starts,
    write_slow_write_script,
)
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

V2_TIMER = "build v2 starts every run with this timer"


def build_v2(into: Path) -> Path:
    """A copy of this checkout laid out as the installed ``parley`` package, with the
    workflow changed: each run of ``ConversationWorkflow`` begins with a timer."""
    package = into / "parley"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "parley", package, ignore=ignore)
    for part in ("workflows", "activities", "services"):
        shutil.copytree(ROOT / part, package / part, ignore=ignore)
    source = package / "workflows" / "conversation.py"
    text = source.read_text()
    marker = "        publish_owner(self._state)\n"
    assert text.count(marker) == 1
    changed = f"        await workflow.sleep(0.001, summary={V2_TIMER!r})\n" + marker
    source.write_text(text.replace(marker, changed))
    return into


@contextmanager
def parley_worker(env: dict[str, str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "parley.cli", "worker"], cwd=cwd, env=env, stdout=out, stderr=out
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait(timeout=30)


async def build_of(client: Client, workflow_id: str) -> str:
    """The build the conversation's latest run is pinned to ('' before its first task)."""
    described = await client.get_workflow_handle(workflow_id).describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id


async def runs_of(client: Client, workflow_id: str) -> list[tuple[str, WorkflowExecutionStatus]]:
    found = [
        (execution.run_id, execution.status, execution.start_time)
        async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'")
    ]
    return [(run_id, status) for run_id, status, _ in sorted(found, key=lambda r: r[2])]


def completed_by(history) -> set[str]:  # type: ignore[no-untyped-def]
    """The builds that completed this run's workflow tasks."""
    return {
        event.workflow_task_completed_event_attributes.deployment_version.build_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    }


def v2_timers(history) -> int:  # type: ignore[no-untyped-def]
    return sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        and V2_TIMER.encode() in event.user_metadata.summary.data
    )


async def test_a_new_build_takes_over_waiting_conversations_without_breaking_old_ones(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    queue = f"parley-deploy-{uuid.uuid4().hex[:8]}"
    deployment = f"parley-test-{uuid.uuid4().hex[:8]}"
    script_file = write_slow_write_script(tmp_path / "script.json", "w1")
    tool_log = tmp_path / "tool.log"
    hold = tool_log.with_suffix(".hold")
    env = {
        **cli_env(client, payload_store, queue),
        "PARLEY_DEPLOYMENT_NAME": deployment,
        "PARLEY_MODEL": f"script:{script_file}",
        "PARLEY_TOOLS": LIVENESS_TOOLS,
        "PARLEY_TEST_TOOL_LOG": str(tool_log),
    }
    v1_env = {**env, "PYTHONPATH": str(ROOT), "PARLEY_BUILD_ID": "v1"}
    v2_root = build_v2(tmp_path / "v2")
    v2_env = {**env, "PYTHONPATH": f"{v2_root}{os.pathsep}{ROOT}", "PARLEY_BUILD_ID": "v2"}
    conv = Conversations(client, Settings(task_queue=queue))
    waiting, busy, fresh = new_session(), new_session(), new_session()
    waiting_id, busy_id, fresh_id = (workflow_id_for(s) for s in (waiting, busy, fresh))

    async def current() -> str | None:
        return current_build(await describe(client, deployment))

    with parley_worker(v1_env, ROOT, tmp_path / "worker-v1.log"):
        # The deployment's first build makes itself current: no deploy step needed.
        async def v1_current() -> bool:
            return await current() == "v1"

        await eventually(v1_current, 90, "build v1 to become current by itself")
        assert (await conv.send(waiting, "lee", "write it")).status == "awaiting_approval"
        assert (await conv.send(busy, "lee", "write it")).status == "awaiting_approval"
        hold.touch()
        deciding = asyncio.create_task(
            conv.decide(busy, "lee", [Decision(tool_call_id="w1", action="approve")])
        )

        async def busy_started() -> bool:
            return len(tool_starts(tool_log)) == 1

        await eventually(busy_started, 60, "the busy conversation's tool to start on v1")
        assert await build_of(client, waiting_id) == "v1"

        with parley_worker(v2_env, v2_root, tmp_path / "worker-v2.log"):
            deployed = subprocess.run(
                [sys.executable, "-m", "parley.cli", "deploy", "v2", "--wait", "90"],
                cwd=ROOT,
                env=v1_env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert deployed.returncode == 0, deployed.stderr
            assert f"build v2 of deployment {deployment} is current (was v1)" in deployed.stdout
            assert "2 running conversation(s) on other builds asked to move" in deployed.stdout

            # The waiting conversation moves to v2 at once, its call still pending.
            async def waiting_moved() -> bool:
                return await build_of(client, waiting_id) == "v2"

            await eventually(waiting_moved, 60, "the waiting conversation to move to v2")
            state = await conv.state(waiting, "lee")
            assert [call.tool_call_id for call in state.pending] == ["w1"]
            assert [e.detail for e in state.audit if e.event == "upgraded"] == [
                {"from_build": f"{deployment}:v1"}
            ]
            # The busy one stays on v1 while its tool runs there.
            assert await build_of(client, busy_id) == "v1"
            assert not deciding.done()
            hold.unlink()
            finished = await asyncio.wait_for(deciding, timeout=90)
            assert finished.status == "completed" and finished.reply == "written once"

            async def busy_moved() -> bool:
                return await build_of(client, busy_id) == "v2"

            await eventually(busy_moved, 60, "the busy conversation to move to v2 after its turn")

            approved = await conv.decide(
                waiting, "lee", [Decision(tool_call_id="w1", action="approve")]
            )
            assert approved.status == "completed" and approved.reply == "written once"
            assert (await conv.send(fresh, "lee", "write it")).status == "awaiting_approval"
            assert await build_of(client, fresh_id) == "v2"

    # Every call ran once, each under its own key, on the build its run was pinned to.
    keys = [start["key"] for start in tool_starts(tool_log)]
    assert sorted(keys) == sorted([f"{busy_id}:w1", f"{waiting_id}:w1"])
    assert sorted(tool_log.with_suffix(".done").read_text().split()) == sorted(keys)

    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter)
    for workflow_id in (waiting_id, busy_id):
        (old_run, old_status), (new_run, new_status) = await runs_of(client, workflow_id)
        assert old_status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        assert new_status == WorkflowExecutionStatus.RUNNING
        old = await client.get_workflow_handle(workflow_id, run_id=old_run).fetch_history()
        new = await client.get_workflow_handle(workflow_id, run_id=new_run).fetch_history()
        assert completed_by(old) == {"v1"} and v2_timers(old) == 0
        assert completed_by(new) == {"v2"} and v2_timers(new) == 1
        # The old run still replays on the code that made it.
        await replayer.replay_workflow(old)
    fresh_history = await client.get_workflow_handle(fresh_id).fetch_history()
    assert completed_by(fresh_history) == {"v2"} and v2_timers(fresh_history) == 1
