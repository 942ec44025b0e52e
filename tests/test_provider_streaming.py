"""A real provider path: the real ``langchain-openai`` client against ``FakeOpenAI``, a
chat-completions server on 127.0.0.1 that streams SSE chunks with delays, reports usage
(in the final chunk when asked) and answers ``400 context_length_exceeded`` past its
window.

The model is the one Parley builds (``build_openai_model``); where a test needs it to
stream it asks for that on a copy, as the model activity's streaming does.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_openai import ChatOpenAI
from temporalio.exceptions import ApplicationError

from parley.activities.model_calls import _model_failure
from parley.activities.models.failures import classify_model_error
from parley.activities.models.openai_provider import build_openai_model
from parley.config.settings import Settings
from parley.contracts import CALL_MODEL
from parley.contracts.errors import ContextLengthExceeded, ErrorType, ModelRequestError
from parley.tools.loading import ModelConfig
from tests.support import registry
from tests.support.openai_fake import FakeOpenAI, ScriptedReply, error_body
from tests.support.plans import activity_attempts, fetch
from tests.support.transcripts import new_session

API_KEY = "sk-test-streaming-0123456789"
THIRTY_WORDS = " ".join(f"word{i}" for i in range(30))


pytestmark = pytest.mark.fake_openai(api_key=API_KEY, chunk_delay=0.02)


def parley_model() -> Any:
    return build_openai_model(ModelConfig.from_settings(Settings.from_env(), "fake-model"))


def streaming_model() -> Any:
    return parley_model().model_copy(update={"streaming": True})


def merged(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    return whole


def as_usage_metadata(reported: dict[str, int]) -> dict[str, int]:
    return {
        "input_tokens": reported["prompt_tokens"],
        "output_tokens": reported["completion_tokens"],
        "total_tokens": reported["total_tokens"],
    }


def usage_of(message: AIMessage) -> dict[str, int]:
    assert message.usage_metadata is not None, "no usage_metadata on the reply"
    return {
        key: message.usage_metadata[key]
        for key in ("input_tokens", "output_tokens", "total_tokens")
    }


def test_parley_asks_for_usage_when_streaming(fake: FakeOpenAI) -> None:
    assert parley_model().stream_usage is True


async def test_astream_delivers_words_as_the_provider_writes_them(fake: FakeOpenAI) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.05)  # 1.5 s from first word to last
    chunks: list[AIMessageChunk] = []
    provider_done_at_first_text = None
    async for chunk in streaming_model().astream([HumanMessage("say thirty words")]):
        if chunk.content and provider_done_at_first_text is None:
            provider_done_at_first_text = fake.streams[0].done.is_set()
        chunks.append(chunk)

    request = fake.last_request.body
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    (stream,) = fake.streams
    assert stream.completed
    assert provider_done_at_first_text is False  # the first word came before the last left
    texts = [c.content for c in chunks if c.content]
    assert len(texts) == 30
    assert texts == stream.text_deltas
    whole = merged(chunks)
    assert whole.content == THIRTY_WORDS
    assert usage_of(whole) == as_usage_metadata(fake.usage_reported[-1])
    assert fake.usage_reported[-1]["prompt_tokens"] == fake.last_request.input_tokens


async def test_astream_delivers_tool_call_arguments_in_pieces(fake: FakeOpenAI) -> None:
    args = {"title": "The quarterly plan for the offsite", "attendees": 12}
    fake.reply("Writing it.", tool_calls=[{"name": "write_record", "args": args, "id": "w1"}])
    chunks = [c async for c in streaming_model().astream("write the plan")]

    pieces = [piece["args"] for c in chunks for piece in c.tool_call_chunks if piece.get("args")]
    assert len(pieces) > 3  # the arguments arrived as several deltas
    whole = merged(chunks)
    assert whole.content == "Writing it."
    assert [(c["name"], c["args"], c["id"]) for c in whole.tool_calls] == [
        ("write_record", args, "w1")
    ]
    assert whole.response_metadata["finish_reason"] == "tool_calls"
    assert usage_of(whole) == as_usage_metadata(fake.usage_reported[-1])


async def test_usage_is_in_a_reply_that_is_not_streamed(fake: FakeOpenAI) -> None:
    fake.reply("a whole answer in one piece")
    reply = await parley_model().ainvoke([HumanMessage("hello there")])

    assert not fake.last_request.body.get("stream")
    assert fake.streams == []
    (reported,) = fake.usage_reported
    assert usage_of(reply) == as_usage_metadata(reported)
    assert reported["prompt_tokens"] == count_tokens_approximately(
        [{"role": "user", "content": "hello there"}]
    )
    assert reported["completion_tokens"] > 0


def test_a_stream_without_include_usage_reports_none(fake: FakeOpenAI) -> None:
    fake.reply("no usage please")
    model = ChatOpenAI(model="fake-model", base_url=fake.base_url, api_key=API_KEY, streaming=True)
    whole = merged(list(model.stream("hi")))

    assert "stream_options" not in fake.last_request.body
    assert whole.content == "no usage please"
    assert whole.usage_metadata is None
    assert fake.usage_reported == []


def test_past_the_window_is_a_clear_non_retryable_failure(fake: FakeOpenAI) -> None:
    fake.context_window = 40
    fake.reply("fits")
    long_message = HumanMessage("lorem ipsum " * 40)
    with pytest.raises(Exception) as info:
        parley_model().invoke([long_message])

    error = classify_model_error(info.value)
    assert isinstance(error, ContextLengthExceeded)
    assert isinstance(error, ModelRequestError)
    assert error.window == 40
    assert error.http_status == 400
    assert error.message.startswith(
        "context window exceeded: the conversation is too long for the model "
        "(its window of 40 tokens) (HTTP 400)"
    )
    failure = _model_failure(info.value)
    assert isinstance(failure, ApplicationError)
    assert failure.type == ErrorType.CONTEXT_LENGTH_EXCEEDED
    assert failure.non_retryable
    assert "window of 40 tokens" in failure.message
    assert fake.context_refusals == 1
    assert fake.pending == 1  # the refused request used up no scripted reply
    assert fake.usage_reported == []

    assert parley_model().invoke([HumanMessage("short")]).content == "fits"


def test_the_room_asked_for_the_reply_counts_against_the_window(fake: FakeOpenAI) -> None:
    fake.context_window = 100
    fake.reply("fits without room")
    model = parley_model()
    with pytest.raises(Exception) as info:
        model.bind(max_tokens=99).invoke([HumanMessage("hi")])
    assert isinstance(classify_model_error(info.value), ContextLengthExceeded)
    assert model.invoke([HumanMessage("hi")]).content == "fits without room"


def test_a_stream_past_the_window_fails_before_any_chunk(fake: FakeOpenAI) -> None:
    fake.context_window = 10
    with pytest.raises(Exception) as info:
        list(streaming_model().stream([HumanMessage("far too long for ten tokens " * 5)]))
    assert isinstance(classify_model_error(info.value), ContextLengthExceeded)
    assert fake.streams == []


def test_the_fake_counts_input_as_the_client_side_does(fake: FakeOpenAI) -> None:
    """The window is enforced on ``count_tokens_approximately`` of the wire messages; a
    client that budgets with the same function on its LangChain messages agrees to
    within a token or two a message (the wire form drops a tool message's name)."""
    fake.reply("ok")
    sent = [
        SystemMessage("be brief"),
        HumanMessage("add 2 and 3 please " * 20),
        AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "c1"}]),
        ToolMessage("5" * 300, tool_call_id="c1", name="add"),
    ]
    parley_model().invoke(sent)
    client_side = count_tokens_approximately(sent)
    assert fake.last_request.input_tokens is not None
    assert abs(fake.last_request.input_tokens - client_side) <= 2 * len(sent)


@pytest.mark.parametrize(
    ("message", "window"),
    [
        ("This model's maximum context length is 128,000 tokens. However...", 128000),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200000),
        ("Input exceeds the context window of 32768 tokens", 32768),
        ("context_length_exceeded", None),
    ],
)
def test_the_window_is_read_from_the_providers_words(
    fake: FakeOpenAI, message: str, window: int | None
) -> None:
    fake.error(400, error_body(message, code="context_length_exceeded"))
    with pytest.raises(Exception) as info:
        parley_model().invoke("hi")
    error = classify_model_error(info.value)
    assert isinstance(error, ContextLengthExceeded)
    assert error.window == window
    where = f"its window of {window} tokens" if window else "its context window"
    assert where in error.message


# --- through a worker ---------------------------------------------------------------------


async def test_a_turn_past_the_window_fails_once_naming_it(parley_worker, fake: FakeOpenAI) -> None:
    """Through a real worker: the provider's 400 is a model-call failure of its own type
    that Temporal never retries, naming the window in the history (the Temporal UI); the
    turn fails with one line and a RUN_ERROR of that type, after the run's usage event;
    the conversation goes on. (What the workflow does before failing, such as compacting
    and calling again, is the bounded context's: every call here is refused.)"""
    fake.context_window = 200
    sid = new_session()
    async with parley_worker(registry(), parley_model()) as conversations:
        turn = await conversations.send(sid, "alice", "lorem ipsum dolor " * 100)

        assert turn.status == "failed"
        assert turn.error is not None and "\n" not in turn.error
        assert fake.context_refusals >= 1
        history = await fetch(conversations, sid)
        attempts = activity_attempts(history, CALL_MODEL)
        assert attempts and set(attempts) == {1}  # non-retryable: one attempt each
        first = next(
            e.activity_task_failed_event_attributes.failure
            for e in history.events
            if e.HasField("activity_task_failed_event_attributes")
        )
        assert first.application_failure_info.type == ErrorType.CONTEXT_LENGTH_EXCEEDED
        assert first.application_failure_info.non_retryable
        assert first.message.startswith("context window exceeded")
        assert "its window of 200 tokens" in first.message
        events = [e.event for e in (await conversations.events(sid, "alice")).events]
        assert events[-1]["type"] == "RUN_ERROR"
        assert events[-1]["code"] == ErrorType.CONTEXT_LENGTH_EXCEEDED
        assert events[-2]["type"] == "CUSTOM"  # the run's usage, before its end

        fake.context_window = None  # as if the provider's window grew: the conversation goes on
        fake.reply("fits")
        again = await conversations.send(sid, "alice", "short")
        assert (again.status, again.reply) == ("completed", "fits")


def test_a_responder_answers_when_the_script_is_empty(fake: FakeOpenAI) -> None:
    """For long conversations: every request answered from what it carries."""
    fake.responder = lambda request: ScriptedReply(f"you sent {len(request.messages)}")
    model = parley_model()
    assert model.invoke([HumanMessage("one")]).content == "you sent 1"
    assert model.invoke([HumanMessage("one"), HumanMessage("two")]).content == "you sent 2"
    fake.responder = lambda request: None  # declines: the fake's own clear error
    with pytest.raises(Exception, match="no scripted response left"):
        model.invoke("three")


def test_built_model_streams_when_asked_and_not_otherwise(fake: FakeOpenAI) -> None:
    """``call_model`` reads replies with ``astream``: ``.stream()`` makes one
    streamed request with usage in its final chunk; ``.invoke()`` one plain request."""
    fake.reply("whole reply")
    fake.reply("plain")
    model = build_openai_model(ModelConfig.from_settings(Settings.from_env(), "fake-model"))
    chunks = list(model.stream("hi"))
    assert "".join(str(c.content) for c in chunks) == "whole reply" and len(chunks) > 1
    assert fake.last_request.body.get("stream") is True
    assert fake.last_request.body.get("stream_options") == {"include_usage": True}
    assert model.invoke("hi").content == "plain"
    assert not fake.last_request.body.get("stream")
    assert len(fake.requests) == 2
