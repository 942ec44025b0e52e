"""Usage: every model call's tokens, as the provider reported them, recorded with the
turn and summed per conversation, on every surface.

A real worker on the real dev server; the model is langchain-openai talking to
``FakeOpenAI`` (a chat-completions server on 127.0.0.1 that counts each request's tokens
and reports them). The totals are checked against what the fake reported, and shown by
``parley show`` (text and ``--json``), the gateway's conversation JSON, the AG-UI
``parley.usage`` event at the end of each run and the ``parley_model_tokens`` metric.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from temporalio.client import Client

from parley.activities.models.openai_provider import build_openai_model
from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import Decision, Usage
from parley.tools.loading import ModelConfig
from parley.worker.wiring import build_worker, connect, metrics_runtime
from parley.workflows.turn.usage import USAGE_EVENT
from tests.support import registry, script
from tests.support.cli import parley_against
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.openai_fake import FakeOpenAI
from tests.support.ports import free_port
from tests.support.prometheus import metric_value
from tests.support.provider_runs import openai_usage as reported
from tests.support.transcripts import new_session

USER = "alice"


def openai_model(*, streaming: bool = False) -> Any:
    model = build_openai_model(ModelConfig.from_settings(Settings.from_env(), "gpt-test"))
    return model.model_copy(update={"streaming": True}) if streaming else model


def script_three_calls(fake: FakeOpenAI) -> None:
    """A write that waits for approval, its answer, then a second message's reply."""
    fake.reply("I will write it.", tool_calls=[{"name": "write_record", "args": {"title": "Q3"}}])
    fake.reply("Written: Q3.")
    fake.reply("Hello again, with a somewhat longer answer this time.")


async def three_calls(conversations: Conversations, sid: str) -> list[Any]:
    first = await conversations.send(sid, USER, "write a record Q3")
    assert first.status == "awaiting_approval"
    (pending,) = first.pending
    second = await conversations.decide(
        sid, USER, [Decision(tool_call_id=pending.tool_call_id, action="approve")]
    )
    third = await conversations.send(sid, USER, "hello")
    assert (second.status, third.status) == ("completed", "completed")
    return [first, second, third]


def usage_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == USAGE_EVENT]


async def cli(conversations: Conversations, client: Client, *args: str) -> str:
    """What ``parley ARGS`` prints against the test's worker (it must succeed)."""
    done = await parley_against(conversations, client, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_the_totals_are_what_the_provider_reported_on_every_surface(
    parley_worker, fake: FakeOpenAI, client: Client
) -> None:
    script_three_calls(fake)
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        turns = await three_calls(conversations, sid)

        expected = reported(fake)
        assert fake.attempts == 3 and expected.model_calls == 3
        assert expected.input_tokens > 0 and expected.output_tokens > 0
        # Each turn records its own call; the conversation sums them.
        assert [t.usage for t in turns] == [reported(fake, slice(i, i + 1)) for i in range(3)]
        assert sum((t.usage for t in turns), Usage()) == expected
        state = await conversations.state(sid, USER)
        assert state.usage == expected
        assert state.last_turn is not None and state.last_turn.usage == turns[2].usage

        shown = json.loads(
            await cli(conversations, client, "show", "--session", sid, "--user", USER, "--json")
        )
        assert shown["usage"] == expected.model_dump()
        text = await cli(conversations, client, "show", "--session", sid, "--user", USER)
        line = (
            f"usage: {expected.total_tokens:,} tokens ({expected.input_tokens:,} in, "
            f"{expected.output_tokens:,} out) over 3 model calls"
        )
        assert [ln for ln in text.splitlines() if ln.startswith("usage:")] == [line]

        async with serve_gateway(conversations) as url:
            async with httpx.AsyncClient(base_url=url, headers=auth(ALICE_TOKEN)) as http:
                answer = await http.get(f"/v1/conversations/{sid}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"] == expected.model_dump()

        page = await conversations.events(sid, USER)
        events = [e.event for e in page.events]
    # One parley.usage per run, the run's last event before RUN_FINISHED.
    finished = [i for i, e in enumerate(events) if e["type"] == "RUN_FINISHED"]
    assert len(finished) == 3
    for index in finished:
        assert events[index - 1]["type"] == "CUSTOM"
        assert events[index - 1]["name"] == USAGE_EVENT
    values = usage_events(events)
    assert [v["run"] for v in values] == [t.usage.model_dump() for t in turns]
    assert values[-1] == {
        **expected.model_dump(),
        "run": turns[2].usage.model_dump(),
        "subagents": Usage().model_dump(),  # no subagent here
    }
    assert [v["model_calls"] for v in values] == [1, 2, 3]


async def test_a_streamed_reply_reports_its_usage_from_the_final_chunk(
    parley_worker, fake: FakeOpenAI
) -> None:
    fake.chunk_delay = 0.005
    fake.reply("Streamed, word by word, to the end.")
    sid = new_session()
    async with parley_worker(registry(), openai_model(streaming=True)) as conversations:
        turn = await conversations.send(sid, USER, "stream please")
        state = await conversations.state(sid, USER)

    assert turn.status == "completed", turn.error
    assert fake.last_request.body["stream"] is True
    assert fake.last_request.body["stream_options"] == {"include_usage": True}
    assert len(fake.streams) == 1 and fake.streams[0].completed
    assert state.usage == reported(fake)
    assert state.usage.input_tokens == fake.last_request.input_tokens
    assert turn.usage == state.usage


async def test_the_sum_is_carried_across_continue_as_new(parley_worker, fake: FakeOpenAI) -> None:
    for n in range(3):
        fake.reply(f"answer number {n}")
    sid = new_session()
    async with parley_worker(
        registry(), openai_model(), continue_as_new_after_events=1
    ) as conversations:
        for n in range(3):
            assert (await conversations.send(sid, USER, f"message {n}")).status == "completed"
        state = await conversations.state(sid, USER)

    assert state.counters.continued_as_new >= 2
    assert state.usage == reported(fake)
    assert state.usage.model_calls == 3


async def test_a_model_that_reports_no_usage_counts_calls_only(parley_worker) -> None:
    sid = new_session()
    async with parley_worker(registry(), script({"content": "hi"})) as conversations:
        turn = await conversations.send(sid, USER, "hello")
        state = await conversations.state(sid, USER)
    assert turn.usage == Usage(model_calls=1)
    assert state.usage == Usage(model_calls=1)


async def test_the_metric_counts_tokens_by_kind(
    client: Client, payload_store, fake: FakeOpenAI
) -> None:
    address = f"127.0.0.1:{free_port()}"
    settings = Settings(
        temporal_address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=f"parley-usage-{uuid.uuid4().hex[:8]}",
        metrics_address=address,
        payload_store=str(payload_store.root),
    )
    script_three_calls(fake)
    worker_client = await connect(settings, runtime=metrics_runtime(settings))
    worker = build_worker(worker_client, settings, registry=registry(), model=openai_model())
    async with worker:
        await three_calls(Conversations(client, settings), new_session())
        metrics = httpx.get(f"http://{address}/metrics", timeout=10).text

    expected = reported(fake)
    assert metric_value(metrics, "parley_model_tokens", kind="input") == expected.input_tokens
    assert metric_value(metrics, "parley_model_tokens", kind="output") == expected.output_tokens
