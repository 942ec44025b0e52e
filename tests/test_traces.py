"""End to end: one OpenTelemetry trace follows a turn from the request through the
workflow, the model activity (with its token counts) and the tool activity, through
``temporalio.contrib.opentelemetry``.

Once in this process, with the SDK's in-memory exporter: a real gateway, worker and dev
server, and langchain-openai talking to ``FakeOpenAI``, whose reported usage the model
span must carry. Once across processes: real ``parley worker`` and ``parley gateway``
processes with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP/HTTP receiver
running in the test. Both continue the caller's ``traceparent``, so the trace is the
caller's. Without the variable, nothing is traced.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider

from parley.cli.app import command_name
from parley.client import Conversations, connect
from parley.config.settings import Settings
from parley.observability import tracing
from parley.storage import LocalFileStorageDriver
from parley.worker.wiring import build_worker
from tests.support import registry, runs_of
from tests.support.cli import parley
from tests.support.dev import running_dev_server, without_paths
from tests.support.gateway import ALICE_TOKEN, TOKENS, auth, gateway_processes, serve_gateway
from tests.support.openai_env import openai_model
from tests.support.openai_fake import FakeOpenAI
from tests.support.otlp import OtlpReceiver
from tests.support.transcripts import new_session


def traceparent() -> tuple[str, str]:
    """A caller's W3C ``traceparent`` header and its trace id."""
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01", trace_id


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, to memory, for this test (the global provider stays: OpenTelemetry
    takes one per process; the exporter is shut, so later spans are dropped)."""
    memory = InMemorySpanExporter()
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use(provider)
    try:
        yield memory
    finally:
        tracing.use(None)
        memory.shutdown()


def ancestors(span: Any, by_id: dict[int, Any]) -> list[str]:
    """The names of the spans above ``span``, nearest first, up to the trace's root."""
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def test_one_trace_follows_a_turn_from_the_gateway_to_the_model_and_the_tool(
    client: Client,
    payload_store: LocalFileStorageDriver,
    exporter: InMemorySpanExporter,
    fake: FakeOpenAI,
) -> None:
    fake.reply("I will write it.", tool_calls=[{"name": "write_record", "args": {"title": "Q3"}}])
    fake.reply("Written: Q3.")
    settings = Settings(
        temporal_address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=f"parley-traces-{uuid.uuid4().hex[:8]}",
        payload_store=str(payload_store.root),
    )
    traced = await connect(settings, role="test")  # tracing is on: it carries the plugin
    model = openai_model()
    sid = new_session()
    first, first_trace = traceparent()
    second, second_trace = traceparent()
    async with (
        build_worker(traced, settings, registry=registry(), model=model),
        serve_gateway(Conversations(traced, settings)) as base,
        httpx.AsyncClient(base_url=base, headers=auth(ALICE_TOKEN), timeout=60) as http,
    ):
        sent = await http.post(
            f"/v1/conversations/{sid}/messages",
            json={"text": "write the Q3 record"},
            headers={"traceparent": first},
        )
        assert sent.json()["status"] == "awaiting_approval", sent.text
        (pending,) = sent.json()["pending"]
        decided = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": pending["tool_call_id"], "action": "approve"}]},
            headers={"traceparent": second},
        )
        assert decided.json()["status"] == "completed", decided.text
    assert [run["title"] for run in runs_of("write_record")][-1:] == ["Q3"]

    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}
    reported = fake.usage_reported

    # The decision's turn: the request, the update, the tool, then the model again.
    turn = [s for s in spans if f"{s.context.trace_id:032x}" == second_trace]
    names = {s.name for s in turn}
    assert {
        "POST /v1/conversations/{session_id}/decisions",
        "StartWorkflowUpdate:decide",
        "HandleUpdate:decide",
        "StartActivity:parley.run_tool",
        "RunActivity:parley.run_tool",
        "execute_tool write_record",
        "RunActivity:parley.call_model",
        "chat gpt-test",
    } <= names, sorted(names)
    assert not [n for n in names if n.endswith((" http send", " http receive"))]  # per message
    (tool,) = [s for s in turn if s.name == "execute_tool write_record"]
    assert tool.attributes["gen_ai.tool.call.id"] == pending["tool_call_id"]
    assert tool.attributes["parley.tool.status"] == "success"
    assert tool.attributes["parley.session_id"] == sid
    above_tool = ancestors(tool, by_id)
    assert above_tool[:3] == [
        "RunActivity:parley.run_tool",
        "StartActivity:parley.run_tool",
        "HandleUpdate:decide",
    ]
    assert "POST /v1/conversations/{session_id}/decisions" in above_tool
    (chat,) = [s for s in turn if s.name == "chat gpt-test"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == reported[1]["prompt_tokens"]
    assert chat.attributes["gen_ai.usage.output_tokens"] == reported[1]["completion_tokens"]
    assert "HandleUpdate:decide" in ancestors(chat, by_id)

    # The message's turn is the first caller's trace, with the first call's tokens.
    opening = [s for s in spans if f"{s.context.trace_id:032x}" == first_trace]
    (first_chat,) = [s for s in opening if s.name == "chat gpt-test"]
    assert first_chat.attributes["gen_ai.usage.input_tokens"] == reported[0]["prompt_tokens"]
    assert "HandleUpdate:send_message" in ancestors(first_chat, by_id)
    assert not [s for s in opening if s.name.startswith("execute_tool")]  # not yet approved


def test_without_an_otlp_endpoint_nothing_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.from_env().otlp_traces_url is None
    tracing.configure(Settings.from_env(), "test")
    assert tracing.plugins() == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert Settings.from_env().otlp_traces_url == "http://127.0.0.1:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/traces")
    assert Settings.from_env().otlp_traces_url == "http://127.0.0.1:9/traces"  # as given
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert Settings.from_env().otlp_traces_url is None


def wait_for(receiver: OtlpReceiver, trace_id: str, names: set[str]) -> list[Any]:
    deadline = time.monotonic() + 30
    while True:
        spans = receiver.in_trace(trace_id)
        if names <= {s.name for s in spans}:
            return spans
        assert time.monotonic() < deadline, sorted({(s.service, s.name) for s in spans})
        time.sleep(0.2)


async def test_worker_and_gateway_processes_export_one_trace_by_otlp(
    client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    with OtlpReceiver() as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not the default 5 s
        }
        sid = new_session()
        first, _ = traceparent()
        second, second_trace = traceparent()
        with gateway_processes(client, payload_store, tmp_path, TOKENS, **otel) as gateway:
            async with httpx.AsyncClient(
                base_url=gateway.url, headers=auth(ALICE_TOKEN), timeout=60
            ) as http:
                sent = await http.post(
                    f"/v1/conversations/{sid}/messages",
                    json={"text": "write it"},
                    headers={"traceparent": first},
                )
                assert sent.json()["status"] == "awaiting_approval", sent.text
                decided = await http.post(
                    f"/v1/conversations/{sid}/decisions",
                    json={"decisions": [{"tool_call_id": "f1", "action": "approve"}]},
                    headers={"traceparent": second},
                )
                assert decided.json()["status"] == "completed", decided.text
            spans = await asyncio.to_thread(
                wait_for,
                receiver,
                second_trace,
                {
                    "POST /v1/conversations/{session_id}/decisions",
                    "HandleUpdate:decide",
                    "execute_tool slow_write",
                    "RunActivity:parley.call_model",
                },
            )
    services = {s.name: s.service for s in spans}
    assert services["POST /v1/conversations/{session_id}/decisions"] == "parley-gateway"
    assert services["StartWorkflowUpdate:decide"] == "parley-gateway"
    assert services["HandleUpdate:decide"] == "parley-worker"
    assert services["execute_tool slow_write"] == "parley-worker"
    assert any(s.name.startswith("chat ") and s.service == "parley-worker" for s in spans)
    ids = {s.span_id for s in spans}
    (tool,) = [s for s in spans if s.name == "execute_tool slow_write"]
    assert tool.parent_span_id in ids and tool.attributes["gen_ai.tool.call.id"] == "f1"


def test_parley_dev_and_the_cli_trace_one_turn(tmp_path: Path) -> None:
    """The README's `OTEL_EXPORTER_OTLP_ENDPOINT=... parley dev`, and `parley send` from
    another shell: the command's span is the root, the turn's spans are dev's worker's."""
    with OtlpReceiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with running_dev_server(tmp_path / "dev", otel) as server:
            env = {**without_paths(server), **otel}
            sid = new_session()
            sent = parley(env, "send", "--session", sid, "--user", "alice", "hello")
            assert sent.returncode == 0, sent.stderr
            deadline = time.monotonic() + 30
            while True:
                cli = [s for s in receiver.spans if s.service == "parley-cli"]
                turn = receiver.in_trace(cli[0].trace_id) if cli else []
                if {"HandleUpdate:send_message", "RunActivity:parley.call_model"} <= {
                    s.name for s in turn
                }:
                    break
                assert time.monotonic() < deadline, sorted(
                    {(s.service, s.name) for s in receiver.spans}
                )
                time.sleep(0.2)
    (root,) = [s for s in turn if not s.parent_span_id]
    assert (root.service, root.name) == ("parley-cli", "parley send")
    by_id = {s.span_id: s for s in turn}
    (handled,) = [s for s in turn if s.name == "HandleUpdate:send_message"]
    started = by_id[handled.parent_span_id]  # the CLI's update call, under its command
    assert (started.service, started.name) == (
        "parley-cli",
        "StartUpdateWithStartWorkflow:ConversationWorkflow",
    )
    assert started.parent_span_id == root.span_id and handled.service == "parley-dev"
    assert any(s.name.startswith("chat ") and s.service == "parley-dev" for s in turn)


def test_a_commands_span_is_named_by_its_commands_never_its_arguments() -> None:
    assert command_name(["send", "--session", "s1", "hello"]) == "parley send"
    assert command_name(["send", "pending"]) == "parley send"
    assert command_name(["store", "gc", "--dry-run"]) == "parley store gc"
