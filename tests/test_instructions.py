"""The agent's instructions, against a real worker and local servers speaking the OpenAI
protocol and Anthropic's Messages API (the real langchain clients), whose request logs
show what reached the provider. One OpenAI server for the module.

The instructions are the system message of every model call of a long conversation,
through compaction (never summarized) and continue-as-new; a worker restarted with other
instructions changes nothing until the conversation continues as new, which then takes
them and audits the change (``show --audit``, the memo and current details the Temporal
UI shows); ``parley tools`` shows them; a client (the client API, the gateway) cannot
replace them, and adds to them only where the worker allows it, audited; a missing
``@file`` is one line.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowUpdateFailedError

from parley.activities.compaction import SUMMARY_HEADING, SUMMARY_INSTRUCTIONS
from parley.activities.models.anthropic_provider import build_anthropic_model
from parley.activities.models.openai_provider import build_openai_model
from parley.cli.rendering import print_snapshot
from parley.client import ConversationRefused
from parley.client.forks import rewind
from parley.contracts.errors import ErrorType
from parley.contracts.instructions import INSTRUCTIONS_MEMO, AgentInstructions, sha256_of
from parley.storage import LocalFileStorageDriver
from parley.tools.instructions import AgentSetup, load_agent
from parley.tools.loading import ModelConfig
from tests.support import registry
from tests.support.anthropic_fake import FakeAnthropic
from tests.support.cli import NOWHERE, assert_one_line_error, parley_all
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.openai_fake import FakeOpenAI
from tests.support.openai_script import RecordedRequest, ScriptedReply
from tests.support.processes import cli_env
from tests.support.transcripts import new_session

KEY = "sk-instructions-test-0000"
V1 = "You are the release helper. Name branches feat/<slug>, lower case. (v1)"
V2 = "You are the release helper. Name branches feature/<slug>, lower case. (v2)"
ROOT = Path(__file__).resolve().parents[1]
METADATA = "__temporal_workflow_metadata"  # what the Temporal UI reads current details from


def answer(request: RecordedRequest) -> ScriptedReply:
    """Summarize when asked; otherwise say which message was read."""
    messages = request.messages
    if messages and messages[0]["content"] == SUMMARY_INSTRUCTIONS:
        return ScriptedReply(content=f"Summary: {len(messages[1]['content'])} characters.")
    return ScriptedReply(content=f"read {len(messages)} messages")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    """One server for the module: each test tells its requests by its session id."""
    server = FakeOpenAI(api_key=KEY, responder=answer).start()
    try:
        yield server
    finally:
        server.stop()


def model(fake: FakeOpenAI) -> Any:
    return build_openai_model(ModelConfig("gpt-test", api_key=KEY, base_url=fake.base_url))


def agent(text: str, name: str = "release-helper", *, allow_added: bool = False) -> AgentSetup:
    return AgentSetup(AgentInstructions.of(name, text), "test", allow_added)


def with_agent(setup: AgentSetup) -> Any:
    tools = registry()
    tools.agent = setup
    return tools


def model_calls(fake: FakeOpenAI, sid: str) -> list[list[dict[str, Any]]]:
    """The messages of each chat call of one conversation (the summaries left out)."""
    return [
        r.messages
        for r in fake.requests
        if sid in json.dumps(r.messages) and r.messages[0]["content"] != SUMMARY_INSTRUCTIONS
    ]


def systems(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "system"]


def events(snapshot: Any, *names: str) -> list[Any]:
    return [e for e in snapshot.audit if e.event in names]


async def test_every_call_of_a_long_conversation_has_them_through_compaction_and_continue_as_new(
    parley_worker, fake: FakeOpenAI
) -> None:
    sid = new_session()
    padding = "the quarterly numbers, line by line. " * 60  # about 550 tokens a message
    async with parley_worker(
        with_agent(agent(V1)),
        model(fake),
        model_context_tokens=4_000,
        continue_as_new_after_events=1,
    ) as conversations:
        for n in range(1, 7):
            turn = await conversations.send(sid, "alice", f"{sid} message {n}: {padding}")
            assert turn.status == "completed", turn.error
        state = await conversations.state(sid, "alice")
        description = await conversations.handle(sid).describe()

    calls = model_calls(fake, sid)
    assert len(calls) == 6
    assert all(messages[0] == {"role": "system", "content": V1} for messages in calls)
    assert all(systems(messages) == [V1] for messages in calls)
    assert any(SUMMARY_HEADING in json.dumps(messages) for messages in calls)  # compacted
    summaries = [r for r in fake.requests if sid in json.dumps(r.messages)]
    summaries = [r for r in summaries if r.messages[0]["content"] == SUMMARY_INSTRUCTIONS]
    assert summaries and all(V1 not in json.dumps(r.messages) for r in summaries)
    assert events(state, "compacted") and state.counters.continued_as_new >= 5
    taken = events(state, "instructions", "instructions_changed")
    assert [(e.event, e.detail) for e in taken] == [
        ("instructions", {"name": "release-helper", "sha256": sha256_of(V1)})
    ]
    assert all(V1 not in json.dumps(str(m.content)) for m in state.transcript)  # not a message
    # the newest run, which has made no model call yet, shows what the conversation holds
    memo = await description.memo_value(INSTRUCTIONS_MEMO)
    assert memo == {"name": "release-helper", "sha256": sha256_of(V1)}


async def test_claude_gets_them_as_its_system_prompt(parley_worker) -> None:
    """The same through ``anthropic:`` (the Messages API's ``system``, its cached prefix)."""
    sid = new_session()
    with FakeAnthropic(api_key=KEY) as claude:
        claude.reply("one").reply("two")
        config = ModelConfig("claude-test", api_key=KEY, base_url=claude.base_url)
        async with parley_worker(with_agent(agent(V1)), build_anthropic_model(config)) as conv:
            for text in ("hi", "again"):
                assert (await conv.send(sid, "alice", text)).status == "completed"
        sent = [r.body["system"] for r in claude.message_requests]

    assert len(sent) == 2
    assert all([block["text"] for block in system] == [V1] for system in sent)


async def test_a_restarted_worker_s_new_instructions_wait_for_continue_as_new(
    parley_worker, fake: FakeOpenAI
) -> None:
    sid, queue = new_session(), f"parley-test-{uuid.uuid4().hex[:8]}"
    async with parley_worker(with_agent(agent(V1)), model(fake), task_queue=queue) as conv:
        assert (await conv.send(sid, "alice", f"{sid} one")).status == "completed"
        memo = await (await conv.handle(sid).describe()).memo_value(INSTRUCTIONS_MEMO)
        assert memo == {"name": "release-helper", "sha256": sha256_of(V1)}
    async with parley_worker(with_agent(agent(V2)), model(fake), task_queue=queue) as conv:
        assert (await conv.send(sid, "alice", f"{sid} two")).status == "completed"
        kept = await conv.state(sid, "alice")
        await rewind(conv, sid, "alice", to=kept.transcript_total)  # a new run, all kept
        assert (await conv.send(sid, "alice", f"{sid} three")).status == "completed"
        state = await conv.state(sid, "alice")
        memo = await (await conv.handle(sid).describe()).memo_value(INSTRUCTIONS_MEMO)
        metadata = await conv.handle(sid).query(METADATA, result_type=WorkflowMetadata)

    assert [systems(messages) for messages in model_calls(fake, sid)] == [[V1], [V1], [V2]]
    assert not events(kept, "instructions_changed")
    (changed,) = events(state, "instructions_changed")
    assert changed.actor == "parley"
    assert changed.detail == {
        "from": {"name": "release-helper", "sha256": sha256_of(V1)},
        "to": {"name": "release-helper", "sha256": sha256_of(V2)},
    }
    assert memo == {"name": "release-helper", "sha256": sha256_of(V2)}
    shown = Console(record=True, width=200)  # ``parley show --audit``
    print_snapshot(state, shown, audit=True, hint=False)
    old = json.dumps({"name": "release-helper", "sha256": sha256_of(V1)})
    assert f'instructions_changed  parley  {{"from": {old}' in shown.export_text()
    assert f"**Instructions:** release-helper (sha256 {sha256_of(V2)[:12]})" in (
        metadata.current_details
    )


async def test_continue_as_new_on_a_worker_with_other_instructions_takes_them(
    parley_worker, fake: FakeOpenAI
) -> None:
    sid, queue = new_session(), f"parley-test-{uuid.uuid4().hex[:8]}"
    settings = {"task_queue": queue, "continue_as_new_after_events": 1}
    async with parley_worker(with_agent(agent(V1)), model(fake), **settings) as conv:
        assert (await conv.send(sid, "alice", f"{sid} one")).status == "completed"
    renamed = agent(V2, name="release-helper-2")
    async with parley_worker(with_agent(renamed), model(fake), **settings) as conv:
        assert (await conv.send(sid, "alice", f"{sid} two")).status == "completed"
        state = await conv.state(sid, "alice")

    assert [systems(messages) for messages in model_calls(fake, sid)] == [[V1], [V2]]
    (changed,) = events(state, "instructions_changed")
    assert changed.detail["to"] == {"name": "release-helper-2", "sha256": sha256_of(V2)}


async def test_a_client_adds_to_them_only_where_allowed_and_never_replaces_them(
    parley_worker, fake: FakeOpenAI
) -> None:
    added = "Answer in French."
    refused, allowed = new_session(), new_session()
    async with parley_worker(with_agent(agent(V1)), model(fake)) as conv:
        turn = await conv.send(refused, "alice", f"{refused} hi", added_instructions=added)
        assert turn.status == "failed"
        assert turn.error is not None and "PARLEY_ALLOW_ADDED_INSTRUCTIONS" in turn.error
        assert "\n" not in turn.error
    assert model_calls(fake, refused) == []  # never called with instructions not accepted

    async with parley_worker(with_agent(agent(V1, allow_added=True)), model(fake)) as conv:
        first = await conv.send(allowed, "alice", f"{allowed} hi", added_instructions=added)
        assert first.status == "completed", first.error
        with pytest.raises(ConversationRefused) as later:
            await conv.send(allowed, "alice", "and now", added_instructions="Be rude.")
        assert later.value.error_type == ErrorType.INVALID_MESSAGE
        assert "only the message that starts" in str(later.value)
        with pytest.raises(WorkflowUpdateFailedError) as replaced:
            await conv.handle(allowed).execute_update(
                "send_message",
                {"text": "x", "message_id": "m-x", "user_id": "alice", "instructions": "Obey me."},
            )
        assert "instructions" in str(replaced.value.cause)
        state = await conv.state(allowed, "alice")

    assert [systems(messages) for messages in model_calls(fake, allowed)] == [[f"{V1}\n\n{added}"]]
    (entry,) = events(state, "instructions_added")
    assert entry.actor == "alice"
    assert entry.detail == {"sha256": sha256_of(added), "chars": len(added)}


async def test_the_gateway_takes_an_addition_at_start_and_refuses_a_replacement(
    parley_worker, fake: FakeOpenAI
) -> None:
    sid = new_session()
    messages = f"/v1/conversations/{sid}/messages"
    async with (
        parley_worker(with_agent(agent(V1, allow_added=True)), model(fake)) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=30, headers=auth(ALICE_TOKEN)) as http,
    ):
        replaced = await http.post(messages, json={"text": f"{sid} hi", "instructions": "Obey."})
        assert replaced.status_code == 422, replaced.text
        body = {"text": f"{sid} hi", "added_instructions": "Be brief."}
        assert (await http.post(messages, json=body)).status_code == 200
        later = await http.post(messages, json={"text": "again", "added_instructions": "No."})
        assert later.status_code == 422 and "only the message that starts" in later.text

    assert [systems(messages) for messages in model_calls(fake, sid)] == [[f"{V1}\n\nBe brief."]]


def test_parley_tools_shows_them_and_a_missing_file_is_one_line(tmp_path: Path) -> None:
    text = tmp_path / "release-helper.md"
    text.write_text(V1 + "\n", encoding="utf-8")
    policies = tmp_path / "policies.toml"
    policies.write_text('[agent]\nname = "releases"\ninstructions_file = "release-helper.md"\n')
    base = {**NOWHERE, "PYTHONPATH": str(ROOT), "PARLEY_TOOLS": ""}
    missing = {**base, "PARLEY_INSTRUCTIONS": f"@{tmp_path / 'gone.md'}"}
    shown, as_json, worker, tools = parley_all(
        ({**base, "PARLEY_POLICIES": str(policies)}, ["tools"]),
        ({**base, "PARLEY_INSTRUCTIONS": f"@{text}"}, ["tools", "--json"]),
        (missing, ["worker"]),
        (missing, ["tools"]),
    )
    assert shown.returncode == 0, shown.stderr
    assert f"instructions releases (sha256 {sha256_of(V1 + chr(10))[:12]})" in shown.stdout
    assert V1 in shown.stdout
    assert as_json.returncode == 0, as_json.stderr
    described = json.loads(as_json.stdout)["instructions"]
    assert described["name"] == "release-helper" and described["text"] == V1 + "\n"
    assert described["allow_added"] is False
    for result in (worker, tools):
        assert_one_line_error(result, f"PARLEY_INSTRUCTIONS=@{tmp_path / 'gone.md'}: no such file")


def test_the_loader_refuses_what_is_ambiguous(tmp_path: Path) -> None:
    from parley.tools.policies import AgentTable

    table = AgentTable(name="x", instructions="Be brief.")
    with pytest.raises(ValueError, match="in one place"):
        load_agent({"PARLEY_INSTRUCTIONS": "Be long."}, table, tmp_path / "p.toml")
    with pytest.raises(ValueError, match="PARLEY_ALLOW_ADDED_INSTRUCTIONS='maybe'"):
        load_agent({"PARLEY_ALLOW_ADDED_INSTRUCTIONS": "maybe"})
    setup = load_agent({"PARLEY_ALLOW_ADDED_INSTRUCTIONS": "true"}, table, tmp_path / "p.toml")
    assert setup.instructions is not None and setup.instructions.name == "x"
    assert setup.allow_added and load_agent({}).instructions is None


async def test_parley_send_adds_to_them_from_a_file(
    parley_worker,
    fake: FakeOpenAI,
    client: Client,
    payload_store: LocalFileStorageDriver,
    tmp_path: Path,
) -> None:
    """`parley send --add-instructions @FILE` adds the file's text at start, as the
    client API does; an empty addition is one line and sends nothing."""
    queue = f"parley-instructions-{uuid.uuid4().hex[:8]}"
    sid = new_session()
    addition = tmp_path / "team.md"
    addition.write_text("Answer in French.\n", encoding="utf-8")
    (tmp_path / "empty.md").write_text("\n", encoding="utf-8")
    env = cli_env(client, payload_store, queue)
    who = ["--session", sid, "--user", "alice"]
    setup = with_agent(agent(V1, allow_added=True))
    async with parley_worker(setup, model(fake), task_queue=queue):
        empty, sent = await asyncio.to_thread(
            parley_all,
            (env, ["send", *who, "--add-instructions", f"@{tmp_path / 'empty.md'}", "hi"]),
            (env, ["send", *who, "--json", "--add-instructions", f"@{addition}", f"{sid} hi"]),
        )
    assert_one_line_error(empty, "--add-instructions is empty")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["status"] == "completed"
    assert [systems(m) for m in model_calls(fake, sid)] == [[f"{V1}\n\nAnswer in French."]]
