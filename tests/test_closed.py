"""End to end: closed means closed: after `end --force` (terminate), `show`, the
gateway's JSON and a decision all say the conversation has ended, and none offers its
pending calls. Real dev server, real `parley worker` and `parley gateway` processes, the
real CLI in a subprocess."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import PARLEY_USER, Decision
from parley.contracts.errors import ErrorType
from parley.storage import LocalFileStorageDriver
from tests.support.gateway import ALICE_TOKEN, TOKENS, auth, gateway_processes
from tests.support.processes import ROOT, cli_env
from tests.support.transcripts import new_session
from tests.support.waiting import eventually


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parley.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_after_end_force_show_the_gateway_and_a_decision_say_ended(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    queue = f"parley-closed-{uuid.uuid4().hex[:8]}"
    conv = Conversations(client, Settings(task_queue=queue))
    env = cli_env(client, payload_store, queue)
    sid = new_session()
    with gateway_processes(
        client, payload_store, tmp_path, TOKENS, call_id="c1", PARLEY_TASK_QUEUE=queue
    ) as gateway:
        await eventually(conv.workers_polling, 60, "the worker to poll")
        assert (await conv.send(sid, "alice", "write it")).status == "awaiting_approval"
        url = f"{gateway.url}/v1/conversations/{sid}"
        async with httpx.AsyncClient(timeout=60) as http:
            before = (await http.get(url, headers=auth(ALICE_TOKEN))).json()
            assert before["status"] == "awaiting_approval"
            assert [p["tool_call_id"] for p in before["pending"]] == ["c1"]

            ended = await asyncio.to_thread(cli, env, "end", "-s", sid, "-u", "alice", "--force")
            assert ended.returncode == 0, ended.stderr
            described = await conv.handle(sid).describe()
            assert described.status == WorkflowExecutionStatus.TERMINATED

            # `show`, as text and as JSON: ended, nothing to approve.
            shown = await asyncio.to_thread(cli, env, "show", "-s", sid, "-u", "alice", "--json")
            assert shown.returncode == 0, shown.stderr
            snapshot = json.loads(shown.stdout)
            assert snapshot["status"] == "ended" and snapshot["pending"] == [], snapshot
            text = await asyncio.to_thread(cli, env, "show", "-s", sid, "-u", "alice")
            assert text.returncode == 0, text.stderr
            assert "ended" in text.stdout and "awaiting approval" not in text.stdout
            assert "awaiting_approval" not in text.stdout and "approve" not in text.stdout

            # The gateway's JSON, which the page renders.
            after = (await http.get(url, headers=auth(ALICE_TOKEN))).json()
            assert after["status"] == "ended" and after["pending"] == [], after

            # A decision is refused clearly: the client, the gateway and the CLI.
            began = time.monotonic()
            try:
                await conv.decide(sid, "alice", [Decision(tool_call_id="c1", action="approve")])
            except ConversationRefused as refused:
                assert refused.error_type == ErrorType.CONVERSATION_ENDED, refused.message
                assert "has ended" in refused.message
            else:
                raise AssertionError("a decision on an ended conversation was accepted")
            assert time.monotonic() - began < 10
            answer = await http.post(
                f"{url}/decisions",
                headers=auth(ALICE_TOKEN),
                json={"decisions": [{"tool_call_id": "c1", "action": "approve"}]},
            )
            assert answer.status_code == 409, answer.text
            assert answer.json()["error"]["type"] == ErrorType.CONVERSATION_ENDED
            approve = await asyncio.to_thread(cli, env, "approve", "-s", sid, "-u", "alice", "c1")
            lines = approve.stderr.strip().splitlines()
            assert approve.returncode == 1 and len(lines) == 1, approve.stderr
            assert "has ended" in lines[0], lines[0]
    assert not (tmp_path / "tool.log").exists()  # slow_write never started


async def test_a_closed_conversation_with_no_worker_reads_as_ended_in_one_line(
    client: Client,
) -> None:
    """Terminated, and no worker to replay it: `show` still says it has ended (from
    Temporal's description), within the bound."""
    conv = Conversations(client, Settings(task_queue=f"parley-gone-{uuid.uuid4().hex[:8]}"))
    sid = new_session()
    await client.start_workflow(
        "ConversationWorkflow",
        id=f"conversation-{sid}",
        task_queue=conv.settings.task_queue,
        arg={"session_id": sid, "user_id": "olga"},
        search_attributes=TypedSearchAttributes([SearchAttributePair(PARLEY_USER, "olga")]),
    )
    await conv.handle(sid).terminate(reason="test")
    began = time.monotonic()
    try:
        await conv.state(sid, "olga")
    except ConversationRefused as refused:
        assert refused.error_type == ErrorType.CONVERSATION_ENDED, refused.message
    else:
        raise AssertionError("no worker could have answered")
    assert time.monotonic() - began <= 2 * conv.settings.worker_wait_seconds + 5
