"""End to end: faults injected for real: worker processes SIGKILLed in the middle of a
model call and while a conversation waits for approval, the Temporal dev server
restarted (its persistence file kept) while a decision is owed, and the gateway
SIGKILLed and restarted while a client follows the event stream.

After each: the conversation finishes, every tool call has exactly one result, and the
write happened once (its idempotency key in the tool's side-effect file).
(``tests/test_liveness.py`` and ``tests/test_topology.py`` kill a worker during a tool
call; ``tests/test_openai_workflow.py`` and ``tests/test_plans_workflow.py`` cover model
429s and backends that fail then succeed.)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.client import Conversations, connect
from parley.config.settings import Settings
from parley.contracts import SEARCH_ATTRIBUTES, Decision
from tests.support.gateway import sse_events
from tests.support.ports import free_port
from tests.support.processes import (
    LIVENESS_TOOLS,
    PARLEY_MODULE,
    process,
    tool_starts,
    worker_env,
    write_slow_write_script,
)
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually

TOKEN = "faults-token-0123456789abc"
PARLEY = PARLEY_MODULE
#: What a server still starting (or restarting) answers with: not yet.
UNREACHABLE = (httpx.TransportError, OSError)


@asynccontextmanager
async def dev_server(db: Path, port: int) -> AsyncIterator[WorkflowEnvironment]:
    server = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        dev_server_database_filename=str(db),
        search_attributes=SEARCH_ATTRIBUTES,
        port=port,
        ui=False,
    )
    try:
        yield server
    finally:
        await server.shutdown()


class Rig:
    """The environment of worker and gateway processes, and the files they share."""

    def __init__(self, tmp_path: Path, address: str) -> None:
        self.tmp = tmp_path
        self.settings = Settings(
            temporal_address=address,
            task_queue=f"parley-faults-{uuid.uuid4().hex[:8]}",
            payload_store=str(tmp_path / "payloads"),
        )
        self.model_log = tmp_path / "model.log"
        self.tool_log = tmp_path / "tool.log"
        script = write_slow_write_script(tmp_path / "script.json", "w1")
        tokens = tmp_path / "tokens"
        tokens.write_text(f"alice {TOKEN}\n")
        self.gateway_port = free_port()
        self.env = worker_env(
            address,
            self.settings.task_queue,
            str(self.settings.payload_store),
            PARLEY_MODEL="tests.support.fault_models:held_script",
            PARLEY_TEST_SCRIPT=str(script),
            PARLEY_TEST_MODEL_LOG=str(self.model_log),
            PARLEY_TOOLS=LIVENESS_TOOLS,
            PARLEY_TEST_TOOL_LOG=str(self.tool_log),
            PARLEY_GATEWAY_TOKENS_FILE=str(tokens),
            PARLEY_GATEWAY_PORT=str(self.gateway_port),
        )

    def worker(self, name: str):  # type: ignore[no-untyped-def]
        return process([*PARLEY, "worker"], self.env, self.tmp / f"{name}.log")

    def gateway(self, name: str):  # type: ignore[no-untyped-def]
        return process([*PARLEY, "gateway"], self.env, self.tmp / f"{name}.log")

    async def conversations(self) -> Conversations:
        return Conversations(await connect(self.settings), self.settings)

    def model_calls(self) -> list[dict]:
        if not self.model_log.exists():
            return []
        return [json.loads(line) for line in self.model_log.read_text().splitlines()]

    def writes_done(self) -> list[str]:
        done = self.tool_log.with_suffix(".done")
        return done.read_text().split() if done.exists() else []


async def finished_once(conv: Conversations, rig: Rig, sid: str) -> None:
    """The conversation's call answered once, its write done once."""
    state = await conv.state(sid, "alice")
    answers = tool_messages(state.transcript)
    assert list(answers) == ["w1"] and answers["w1"].artifact["status"] == "success"
    assert rig.writes_done() == [f"conversation-{sid}:w1"]


async def test_a_worker_killed_during_a_model_call_is_replaced_by_another(
    tmp_path: Path,
) -> None:
    port = free_port()
    async with dev_server(tmp_path / "temporal.db", port):
        rig = Rig(tmp_path, f"127.0.0.1:{port}")
        hold = rig.model_log.with_suffix(".hold")
        hold.touch()
        with rig.worker("worker-1") as first, rig.worker("worker-2") as second:
            conv = await rig.conversations()
            await eventually(conv.workers_polling, 60, "the workers to poll", ignoring=UNREACHABLE)
            sid = new_session()
            sending = asyncio.create_task(conv.send(sid, "alice", "write it once"))

            async def model_started() -> list[dict]:
                return rig.model_calls()

            (started,) = await eventually(
                model_started, 60, "the model call to start", ignoring=UNREACHABLE
            )
            victim, survivor = (first, second) if started["pid"] == first.pid else (second, first)
            victim.kill()  # SIGKILL in the middle of the model call
            victim.wait(timeout=20)
            hold.unlink()
            turn = await asyncio.wait_for(sending, timeout=120)
            assert turn.status == "awaiting_approval"
            done = await conv.decide(sid, "alice", [Decision(tool_call_id="w1", action="approve")])
            assert done.status == "completed" and done.reply == "written once"
            assert survivor.poll() is None
            await finished_once(conv, rig, sid)
    calls = rig.model_calls()
    assert [c["pid"] for c in calls[:2]] == [victim.pid, survivor.pid]  # the call, retried
    assert len(calls) == 3  # the retried proposal and the reply: no call was lost or doubled


async def test_workers_killed_while_a_conversation_waits_lose_nothing(tmp_path: Path) -> None:
    port = free_port()
    async with dev_server(tmp_path / "temporal.db", port):
        rig = Rig(tmp_path, f"127.0.0.1:{port}")
        conv = await rig.conversations()
        sid = new_session()
        with rig.worker("worker-1") as first:
            await eventually(conv.workers_polling, 60, "the worker to poll", ignoring=UNREACHABLE)
            assert (await conv.send(sid, "alice", "write it once")).status == "awaiting_approval"
            first.kill()  # SIGKILL while the call waits for a decision
            first.wait(timeout=20)
        with rig.worker("worker-2"):
            done = await conv.decide(sid, "alice", [Decision(tool_call_id="w1", action="approve")])
            assert done.status == "completed" and done.reply == "written once"
            await finished_once(conv, rig, sid)


async def test_a_dev_server_restart_keeps_the_owed_decision(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "temporal.db"
    rig = Rig(tmp_path, f"127.0.0.1:{port}")
    sid = new_session()
    with rig.worker("worker"):
        async with dev_server(db, port):
            conv = await rig.conversations()
            await eventually(conv.workers_polling, 60, "the worker to poll", ignoring=UNREACHABLE)
            assert (await conv.send(sid, "alice", "write it once")).status == "awaiting_approval"
        # The server is down; the worker keeps retrying its polls. Same file, same port:
        async with dev_server(db, port):
            conv = await rig.conversations()
            state = await conv.state(sid, "alice")
            assert [c.tool_call_id for c in state.pending] == ["w1"]
            await eventually(
                conv.workers_polling, 90, "the worker to poll again", ignoring=UNREACHABLE
            )
            done = await conv.decide(sid, "alice", [Decision(tool_call_id="w1", action="approve")])
            assert done.status == "completed" and done.reply == "written once"
            await finished_once(conv, rig, sid)


async def test_a_client_following_the_stream_resumes_across_a_gateway_restart(
    tmp_path: Path,
) -> None:
    port = free_port()
    async with dev_server(tmp_path / "temporal.db", port):
        rig = Rig(tmp_path, f"127.0.0.1:{port}")
        sid = new_session()
        base = f"http://127.0.0.1:{rig.gateway_port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        seen: list[int] = []
        types: list[str] = []

        async def follow(http: httpx.AsyncClient, last_id: str | None, until: str) -> None:
            resume = {"Last-Event-ID": last_id} if last_id else {}
            async with http.stream(
                "GET", f"/v1/conversations/{sid}/events", headers={**headers, **resume}
            ) as stream:
                async for event in sse_events(stream):
                    seen.append(int(event.id or -1))
                    types.append(str(event.type))
                    if event.type == until:
                        return

        async def gateway_up(http: httpx.AsyncClient) -> bool:
            return (await http.get("/healthz")).status_code == 200

        with rig.worker("worker"):
            with rig.gateway("gateway-1") as gateway:
                async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                    await eventually(
                        lambda: gateway_up(http), 60, "the gateway", ignoring=UNREACHABLE
                    )
                    sent = await http.post(
                        f"/v1/conversations/{sid}/messages",
                        json={"text": "write it once"},
                        headers=headers,
                    )
                    assert sent.json()["status"] == "awaiting_approval", sent.text
                    # Follow until the turn has ended with its interrupt.
                    await asyncio.wait_for(follow(http, None, "RUN_FINISHED"), 60)
                gateway.kill()  # SIGKILL: every stream it served is cut
                gateway.wait(timeout=20)
            with rig.gateway("gateway-2"):
                async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                    await eventually(
                        lambda: gateway_up(http), 60, "the new gateway", ignoring=UNREACHABLE
                    )
                    following = asyncio.create_task(follow(http, str(seen[-1]), "RUN_FINISHED"))
                    decided = await http.post(
                        f"/v1/conversations/{sid}/decisions",
                        json={"decisions": [{"tool_call_id": "w1", "action": "approve"}]},
                        headers=headers,
                    )
                    assert decided.json()["status"] == "completed", decided.text
                    await asyncio.wait_for(following, 60)
            conv = await rig.conversations()
            await finished_once(conv, rig, sid)
            history = await conv.handle(sid).fetch_history()
    assert seen == list(range(len(seen))), f"events lost or repeated: {seen}"
    # The bearer token is in no history and no log line of the processes it crossed.
    assert TOKEN.encode() not in history.to_json().encode()
    for log in tmp_path.glob("*.log"):
        assert TOKEN not in log.read_text(), log.name
    assert types.count("RUN_FINISHED") == 2 and "TOOL_CALL_RESULT" in types
    assert len(tool_starts(rig.tool_log)) == 1
