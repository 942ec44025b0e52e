"""``anthropic:`` models: the real ``langchain-anthropic`` client (and the ``anthropic``
SDK under it) against ``FakeAnthropic``, a server on 127.0.0.1 speaking the Messages API
with its SSE events, through Parley's real activity and worker on the real Temporal dev
server.

What must hold: text streams as it is written and tool calls come whole, through the
gate; usage is what the server reported, cache reads and writes included; the system
prompt and the tool catalogue carry ``cache_control``; rate limits and overloads are
retried by Temporal, refusals fail the turn once in one line without the key; "prompt
is too long" compacts the conversation and the turn goes on. One server for the module.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.tools import tool
from temporalio.exceptions import ApplicationError

from parley.activities.compaction import SUMMARY_INSTRUCTIONS
from parley.activities.model_calls import _model_failure, _with_unique_ids
from parley.activities.models.anthropic_provider import EPHEMERAL, with_cached_prefix
from parley.activities.reply_limits import piece_size
from parley.cli.rendering import usage_line
from parley.config.settings import Settings
from parley.contracts import CALL_MODEL, PAYLOAD_CONTEXT, Decision, Usage
from parley.contracts.errors import ErrorType
from parley.tools.loading import ModelConfig
from tests.support import registry
from tests.support.anthropic_fake import FakeAnthropic, Message
from tests.support.openai_script import RecordedRequest
from tests.support.plans import activity_attempts
from tests.support.provider_runs import (
    THIRTY_WORDS,
    USER,
    add,
    one_turn,
    read_four_reports,
    script_a_write,
    shared_server,
    streamed_turn,
    worker_model,
)
from tests.support.provider_runs import anthropic_usage as reported
from tests.support.transcripts import new_session, runs_in

KEY = "sk-ant-api03-parley-test-0123456789abcdef"
WRONG_KEY = "sk-ant-api03-revoked-must-not-leak-9876"

server, fake = shared_server(FakeAnthropic, KEY)


def claude() -> Any:
    """The worker's model as ``PARLEY_MODEL=anthropic:claude-test`` builds it."""
    return worker_model("anthropic:claude-test")


@tool
def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


# --- building the model -----------------------------------------------------------------


def test_the_model_is_built_from_the_settings(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = claude()
    assert model.max_retries == 0 and model._async_client.max_retries == 0
    assert model.default_request_timeout == 120
    assert model.stream_usage is True
    assert model.anthropic_api_url == fake.base_url
    assert KEY not in repr(model) and KEY not in str(model.model_dump())
    monkeypatch.setenv("PARLEY_MODEL_TIMEOUT_SECONDS", "7.5")
    assert claude().default_request_timeout == 7.5
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-other-0000")
    settings = Settings.from_env()
    assert ModelConfig.from_settings(settings, "c", "anthropic").api_key == KEY
    assert ModelConfig.from_settings(settings, "c", "anthropic").base_url == fake.base_url
    assert ModelConfig.from_settings(settings, "g").api_key == "sk-openai-other-0000"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ValueError, match=r"ANTHROPIC_API_KEY is not set"):
        claude()


def test_a_prefix_already_marked_is_left_as_it_is() -> None:
    mine = {"type": "ephemeral", "ttl": "1h"}
    payload = {
        "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tools": [{"name": "x"}, {"name": "y", "cache_control": mine}],
    }
    marked = with_cached_prefix(payload)
    assert marked["system"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in marked["system"][0]
    assert marked["tools"][-1]["cache_control"] == mine
    assert with_cached_prefix({"system": None, "messages": []}) == {"system": None, "messages": []}


def test_usage_without_cache_figures_is_stored_as_before() -> None:
    """Usage travels in workflow history: a call that reports no cache (every call
    before these fields) is written without them, and old payloads read back."""
    plain = Usage(input_tokens=3, output_tokens=2, total_tokens=5, model_calls=1)
    stored = plain.model_dump(mode="json", context=PAYLOAD_CONTEXT)
    assert set(stored) == {"input_tokens", "output_tokens", "total_tokens", "model_calls"}
    assert Usage.model_validate(stored) == plain
    cached = Usage(input_tokens=10, model_calls=1, cache_read_tokens=0, cache_write_tokens=8)
    both = plain + cached
    assert (both.cache_read_tokens, both.cache_write_tokens) == (0, 8)
    assert (plain + plain).cache_read_tokens is None
    reply = AIMessageChunk(
        content="",
        usage_metadata={
            "input_tokens": 40,
            "output_tokens": 2,
            "total_tokens": 42,
            "input_token_details": {"cache_read": 0, "ephemeral_5m_input_tokens": 30},
        },
    )
    counted = Usage.of_call(reply)
    assert (counted.cache_read_tokens, counted.cache_write_tokens) == (0, 30)


def test_a_streamed_block_is_measured_by_its_text_not_its_json() -> None:
    """A reply's bound (``PARLEY_MAX_MODEL_REPLY_BYTES``) counts what a delta adds: an
    Anthropic text delta is a content part of its own, its JSON several times its text."""
    text = AIMessageChunk(content=[{"type": "text", "text": "héllo ", "index": 0}])
    arguments = AIMessageChunk(
        content=[{"type": "input_json_delta", "partial_json": '{"a": ', "index": 1}]
    )
    assert piece_size(text) == len("héllo ".encode())
    assert piece_size(arguments) == len('{"a": ')


def test_a_renamed_call_renames_its_tool_use_part() -> None:
    """Parley gives a call a new id (taken, too long, a subagent's): the reply's own
    ``tool_use`` part follows, or langchain-anthropic would send two calls."""
    part = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}}
    reply = AIMessage(
        content=[{"type": "text", "text": "Adding."}, part],
        tool_calls=[{"name": "add", "args": {"a": 1}, "id": "toolu_1"}],
    )
    renamed = _with_unique_ids(reply, "m-1", 3, {"toolu_1"}, "helper-1")
    (call,) = renamed.tool_calls
    assert call["id"] != "toolu_1"
    assert renamed.content[1] == {**part, "id": call["id"]}
    assert renamed.content[0] == {"type": "text", "text": "Adding."}


# --- over the wire ----------------------------------------------------------------------


async def test_system_and_tools_are_cached_and_the_savings_show_in_usage(
    fake: FakeAnthropic,
) -> None:
    model = claude().bind_tools([add, shout])
    view = [SystemMessage("You are Parley's agent. Be brief."), HumanMessage("2 + 3?")]
    fake.reply("Adding.", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}}])
    fake.reply("Five.")
    chunks = [c async for c in model.astream(view)]
    second = await model.ainvoke(view)

    first_body, second_body = (r.body for r in fake.message_requests)
    assert first_body["stream"] is True and not second_body.get("stream")
    for body in (first_body, second_body):
        assert body["system"] == [
            {
                "type": "text",
                "text": "You are Parley's agent. Be brief.",
                "cache_control": EPHEMERAL,
            }
        ]
        assert [t.get("cache_control") for t in body["tools"]] == [None, EPHEMERAL]
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert isinstance(whole, AIMessageChunk)
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [("add", {"a": 2, "b": 3})]
    written, read = fake.usage_reported
    assert written["cache_creation_input_tokens"] > 0 and written["cache_read_input_tokens"] == 0
    assert read["cache_read_input_tokens"] == written["cache_creation_input_tokens"]
    assert Usage.of_call(whole) == reported(fake, slice(0, 1))
    assert Usage.of_call(second) == reported(fake, slice(1, 2))
    assert Usage.of_call(second).cache_read_tokens == read["cache_read_input_tokens"]


@pytest.mark.parametrize(
    ("status", "error_type", "message", "options", "expected"),
    [
        (429, "rate_limit_error", "Number of requests has exceeded your rate limit", {}, "retry"),
        (529, "overloaded_error", "Overloaded", {}, "retry"),
        (500, "api_error", "Internal server error", {}, "retry"),
        (200, "overloaded_error", "Overloaded", {"in_stream": True}, "retry"),
        (200, "api_error", "Internal server error", {"in_stream": True}, "retry"),
        (400, "invalid_request_error", "messages: roles must alternate", {}, "request"),
        (403, "permission_error", "Your API key does not have permission", {}, "request"),
        (404, "not_found_error", "model: claude-test", {}, "request"),
        (200, "invalid_request_error", "bad", {"in_stream": True}, "request"),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            {},
            "context",
        ),
        (
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, "
            "decrease input length or `max_tokens` and try again",
            {},
            "context",
        ),
    ],
)
async def test_each_error_is_classified_as_parley_retries_it(
    fake: FakeAnthropic,
    status: int,
    error_type: str,
    message: str,
    options: dict[str, Any],
    expected: str,
) -> None:
    fake.error(status, error_type, message, retry_after=2 if status == 429 else None, **options)
    with pytest.raises(Exception) as info:
        async for _ in claude().bind_tools([add]).astream([HumanMessage("hi")]):
            pass
    failure = _model_failure(info.value)
    assert isinstance(failure, ApplicationError)
    assert "\n" not in failure.message and fake.attempts == 1  # the SDK did not retry
    if expected == "retry":
        assert failure.type == ErrorType.MODEL_TRANSIENT and not failure.non_retryable
        assert failure.next_retry_delay == (timedelta(seconds=2) if status == 429 else None)
    elif expected == "request":
        assert failure.type == ErrorType.MODEL_REQUEST and failure.non_retryable
    else:
        assert failure.type == ErrorType.CONTEXT_LENGTH_EXCEEDED and failure.non_retryable
        assert "its window of 200000 tokens" in failure.message
    if status == 404:
        assert "check PARLEY_MODEL and ANTHROPIC_BASE_URL" in failure.message


@pytest.mark.parametrize("wrong", [WRONG_KEY, "gateway-issued-credential-not-sk-shaped-77"])
async def test_a_refused_key_is_named_and_never_repeated(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    """Anthropic's ``sk-ant-...`` keys by their shape, any other by being configured."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", wrong)
    with pytest.raises(Exception) as info:
        await claude().ainvoke("hi")
    assert wrong in str(info.value)  # the server echoes it, as careless ones do
    failure = _model_failure(info.value)
    assert failure.type == ErrorType.MODEL_REQUEST and failure.non_retryable
    assert "refused the API key (check ANTHROPIC_API_KEY) (HTTP 401)" in failure.message
    assert wrong not in failure.message and wrong not in str(failure.details)
    assert "revoked" not in failure.message and "not-sk-shaped" not in failure.message


# --- through a worker -------------------------------------------------------------------


async def test_a_reply_streams_as_anthropic_writes_it(parley_worker, fake: FakeAnthropic) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.05)
    turn, events, state = await streamed_turn(parley_worker, claude())

    assert (turn.status, turn.reply) == ("completed", THIRTY_WORDS)
    body = fake.last_request.body
    assert body["stream"] is True
    assert body["tools"][-1]["cache_control"] == EPHEMERAL  # the catalogue, cached
    assert all("cache_control" not in t for t in body["tools"][:-1])
    (stream,) = fake.streams
    assert stream.completed and len(stream.text_deltas) == 30
    end = next(i for i, e in enumerate(events) if e["type"] == "TEXT_MESSAGE_END")
    deltas = [e["delta"] for e in events[:end] if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) >= 3  # several batches before the end
    assert "".join(deltas) == THIRTY_WORDS
    assert turn.usage == state.usage == reported(fake)
    assert state.usage.cache_write_tokens and state.usage.cache_read_tokens == 0


async def test_a_tool_call_through_the_gate(parley_worker, fake: FakeAnthropic) -> None:
    script_a_write(fake, "toolu_w1")
    sid = new_session()
    async with parley_worker(registry(), claude()) as conversations:
        turn = await conversations.send(sid, USER, "write a record Q3")
        assert turn.status == "awaiting_approval"
        assert [(p.tool_call_id, p.name, p.args) for p in turn.pending] == [
            ("toolu_w1", "write_record", {"title": "Q3"})
        ]
        assert runs_in(sid, "write_record") == []
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="toolu_w1", action="approve")]
        )
        state = await conversations.state(sid, USER)

    assert (done.status, done.reply) == ("completed", "Written: Q3.")
    assert [r["user_id"] for r in runs_in(sid, "write_record")] == [USER]
    sent = fake.last_request.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    uses = [b for b in sent[1]["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b["name"], b["input"]) for b in uses] == [
        ("toolu_w1", "write_record", {"title": "Q3"})
    ]
    (result,) = [b for b in sent[2]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_w1"
    assert json.loads(_text(result["content"])) == {"written": "Q3", "by": USER}
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in fake.requests)
    assert state.usage == reported(fake)
    assert state.usage.cache_read_tokens == fake.usage_reported[1]["cache_read_input_tokens"] > 0
    assert f"{state.usage.cache_read_tokens:,} of them read from the prompt cache" in (
        usage_line(state.usage)
    )


async def test_rate_limits_and_overloads_are_retried_by_temporal(
    parley_worker, fake: FakeAnthropic
) -> None:
    # The overload inside a 200 stream has no header to read: the policy's first
    # interval (1 s) applies; the others ask for 1 s themselves.
    fake.error(200, "overloaded_error", "Overloaded", in_stream=True)
    fake.error(429, "rate_limit_error", "rate limited", retry_after=1)
    fake.error(529, "overloaded_error", "Overloaded", retry_after=1)
    fake.reply("Hello after the storm.")
    turn, history = await one_turn(parley_worker, claude())

    assert (turn.status, turn.reply) == ("completed", "Hello after the storm.")
    assert activity_attempts(history, CALL_MODEL) == [4]
    assert fake.attempts == 4 and fake.pending == 0


async def test_refusals_fail_the_turn_once_in_one_line(
    parley_worker, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.error(400, "invalid_request_error", "tools.0.name: String should match pattern")
    turn, history = await one_turn(parley_worker, claude())
    assert turn.status == "failed" and turn.error is not None and "\n" not in turn.error
    assert "rejected the request (HTTP 400)" in turn.error
    assert activity_attempts(history, CALL_MODEL) == [1]

    monkeypatch.setenv("ANTHROPIC_API_KEY", WRONG_KEY)  # the server echoes it in its 401
    turn, history = await one_turn(parley_worker, claude())
    assert turn.status == "failed" and turn.error is not None and "\n" not in turn.error
    assert "refused the API key (check ANTHROPIC_API_KEY)" in turn.error
    assert activity_attempts(history, CALL_MODEL) == [1]
    assert WRONG_KEY not in str(history.to_json()) and WRONG_KEY not in turn.error


def answer(request: RecordedRequest) -> Message:
    """Claude's side: summarize when asked; else fetch the report a user message asks
    for, then say it was read."""
    body = request.body
    if _text(body.get("system")) == SUMMARY_INSTRUCTIONS:
        return Message(f"Summary: {len(_text(body['messages'][0]['content']))} characters.")
    last = body["messages"][-1]["content"]
    results = [b for b in last if b.get("type") == "tool_result"] if isinstance(last, list) else []
    if results:
        return Message(f"Read the report of {results[0]['tool_use_id']}.")
    day = int(_text(last).split()[-1])
    return Message(tool_calls=[{"name": "fetch_report", "args": {"day": day}}])


async def test_prompt_is_too_long_compacts_and_the_turn_goes_on(
    parley_worker, fake: FakeAnthropic
) -> None:
    """No budget on the worker: Anthropic's 400 "prompt is too long" is the only sign,
    and compacts the conversation, which goes on."""
    fake.context_window = 12_000
    fake.responder = answer
    state = await read_four_reports(parley_worker, claude())

    assert fake.context_refusals >= 1
    compactions = [e for e in state.audit if e.event == "compacted"]
    assert compactions and all(c.detail["harder"] for c in compactions)
    assert len(compactions) == fake.context_refusals
    summaries = [
        r.body for r in fake.message_requests if _text(r.body.get("system")) == SUMMARY_INSTRUCTIONS
    ]
    assert summaries and all(s["system"][-1]["cache_control"] == EPHEMERAL for s in summaries)


def _text(content: Any) -> str:
    """The text of a string or a list of content blocks."""
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""
