"""A worker with ``PARLEY_METRICS_ADDRESS`` serves Prometheus metrics: the SDK's own and
Parley's counters (turns, decisions by action, tool runs by outcome, approvals: a call a
rule's judge decided was requested and answered)."""

from __future__ import annotations

import uuid

import httpx
from temporalio.client import Client

from parley.client import Conversations, connect
from parley.config.settings import Settings
from parley.contracts import Decision, PolicyRule
from parley.tools import ToolRegistry, confirm
from parley.worker.wiring import build_worker, metrics_runtime
from tests.support import call, registry, script
from tests.support.judges import run_query
from tests.support.ports import free_port
from tests.support.prometheus import metric_value
from tests.support.transcripts import new_session

PROPOSE_TWO = {
    "content": "Two writes, two queries.",
    "tool_calls": [
        call("write_record", "m1", title="A"),
        call("write_record", "m2", title="B"),
        call("run_query", "q1", target="staging", sql="select 1"),  # the judge approves
        call("run_query", "q2", target="prod", sql="select 1"),  # the judge denies
    ],
}
JUDGED = PolicyRule(
    name="queries-judged",
    tool="run_query",
    decide="confirm",
    judge="model",
    judge_model="tests.support.judges:careful",
)
DONE = {"content": "Done."}


async def test_the_worker_serves_sdk_and_parley_metrics(client: Client, payload_store) -> None:
    address = f"127.0.0.1:{free_port()}"
    settings = Settings(
        temporal_address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=f"parley-metrics-{uuid.uuid4().hex[:8]}",
        metrics_address=address,
        payload_store=str(payload_store.root),
    )
    worker_client = await connect(settings, runtime=metrics_runtime(settings))
    tools = ToolRegistry(registry(confirm(run_query)).tools(), rules=[JUDGED])
    worker = build_worker(worker_client, settings, registry=tools, model=script(PROPOSE_TWO, DONE))
    async with worker:
        conversations = Conversations(client, settings)
        sid = new_session()
        turn = await conversations.send(sid, "alice", "write A and B")
        assert turn.status == "awaiting_approval"
        assert [p.tool_call_id for p in turn.pending] == ["m1", "m2"]
        await conversations.decide(
            sid,
            "alice",
            [
                Decision(tool_call_id="m1", action="approve"),
                Decision(tool_call_id="m2", action="reject", message="not B"),
            ],
        )
        metrics = httpx.get(f"http://{address}/metrics", timeout=10).text

    assert metric_value(metrics, "parley_turns") == 1
    assert metric_value(metrics, "parley_decisions", action="approve") == 1
    assert metric_value(metrics, "parley_decisions", action="reject") == 1
    assert metric_value(metrics, "parley_tool_runs", tool="write_record", status="success") == 1
    # The calls the judge decided were requested, and answered by it: both count.
    assert metric_value(metrics, "parley_approvals_requested") == 4
    assert metric_value(metrics, "parley_approvals_answered") == 4
    assert metric_value(metrics, "temporal_workflow_task_execution_latency_count") > 0
    assert metric_value(metrics, "temporal_activity_execution_latency_count") > 0
