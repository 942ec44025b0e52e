"""Providers that do not stream: an OpenAI-compatible server that ignores ``stream:
true`` and answers with one JSON body. The real ``langchain-openai`` client, as Parley
builds it, against ``FakeOpenAI(ignore_stream=True)`` on 127.0.0.1, then through a
worker: the body is read whole, and the turn goes on (it failed with "No generation
chunks were returned")."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage

from parley.contracts import Decision, Usage
from tests.support import registry
from tests.support.openai_env import openai_model
from tests.support.openai_fake import FakeOpenAI
from tests.support.provider_runs import add, script_a_write
from tests.support.provider_runs import openai_usage as reported
from tests.support.transcripts import new_session, runs_in

USER = "alice"


pytestmark = pytest.mark.fake_openai(ignore_stream=True)


async def test_a_whole_body_is_read_as_the_stream_asked_for(fake: FakeOpenAI) -> None:
    fake.reply("Adding them.", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "c1"}])
    chunks = [c async for c in openai_model().bind_tools([add]).astream([HumanMessage("2+3?")])]

    assert fake.last_request.body["stream"] is True
    assert fake.streams == []  # the server answered with one JSON body
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert isinstance(whole, AIMessageChunk)
    assert whole.content == "Adding them."
    assert [(c["name"], c["args"], c["id"]) for c in whole.tool_calls] == [
        ("add", {"a": 2, "b": 3}, "c1")
    ]
    assert whole.response_metadata["finish_reason"] == "tool_calls"
    assert Usage.of_call(whole) == reported(fake)


async def test_the_turn_goes_on_through_the_gate(parley_worker, fake: FakeOpenAI) -> None:
    script_a_write(fake, "call_w1")
    sid = new_session()
    async with parley_worker(registry(), openai_model()) as conversations:
        turn = await conversations.send(sid, USER, "write a record Q3")
        assert turn.status == "awaiting_approval", turn.error
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="call_w1", action="approve")]
        )
        state = await conversations.state(sid, USER)

    assert (done.status, done.reply) == ("completed", "Written: Q3.")
    assert [r["user_id"] for r in runs_in(sid, "write_record")] == [USER]
    assert all(r.body["stream"] is True for r in fake.chat_requests)
    assert fake.attempts == 2  # read whole, never asked again
    assert state.usage == reported(fake)
