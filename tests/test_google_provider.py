"""``google:`` models: the real ``langchain-google-genai`` client (and Google's
``google-genai`` SDK under it) against ``FakeGemini``, a server on 127.0.0.1 speaking
the Gemini API with its SSE stream, through Parley's real activity and worker on the
real Temporal dev server.

What must hold: text streams as it is written and function calls come whole (their
thought signatures sent back with them), through the gate; usage is what the server
reported, the part read from Gemini's cache included; ``429 RESOURCE_EXHAUSTED`` and
``503 UNAVAILABLE`` are retried by Temporal (once each: the SDK's retries are off), at
the delay Google's ``RetryInfo`` asks; refusals fail the turn once in one line without
the key; the token-limit error compacts the conversation and the turn goes on. One
server for the module.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from temporalio.exceptions import ApplicationError

from parley.activities.call_ids import GEMINI_SIGNATURES
from parley.activities.compaction import SUMMARY_INSTRUCTIONS
from parley.activities.model_calls import _model_failure, _with_unique_ids
from parley.activities.models.google_provider import API_VERSION
from parley.config.settings import Settings
from parley.contracts import CALL_MODEL, Decision, Usage
from parley.contracts.errors import ErrorType
from parley.tools.loading import ModelConfig
from tests.support import registry
from tests.support.gemini_fake import FakeGemini, Message, signature_of
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
from tests.support.provider_runs import gemini_usage as reported
from tests.support.transcripts import new_session, runs_in

KEY = "AIzaSyParleyTest0123456789abcdefghijklmn"
WRONG_KEY = "AIzaSyRevokedMustNotLeak9876543210zyxwv"

server, fake = shared_server(FakeGemini, KEY)


def gemini() -> Any:
    """The worker's model as ``PARLEY_MODEL=google:gemini-test`` builds it."""
    return worker_model("google:gemini-test")


# --- building the model -----------------------------------------------------------------


async def test_the_model_is_built_from_the_settings_alone(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's own variables would send it elsewhere: none is used.
    monkeypatch.setenv("GOOGLE_GENAI_API_VERSION", "v1")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GEMINI_API_KEY", "AIzaSyOtherVariableMustNotBeUsed000000000")
    model = gemini()
    assert model.max_retries == 1  # the SDK counts attempts: the request alone
    assert model.timeout == 120 and model.base_url == fake.base_url
    assert KEY not in repr(model) and KEY not in str(model.model_dump())
    fake.reply("Hi.")
    assert (await model.ainvoke("hi")).content == "Hi."
    (request,) = fake.generate_requests
    assert request.path == f"/{API_VERSION}/models/gemini-test:generateContent"
    assert request.headers["x-goog-api-key"] == KEY and KEY not in request.path
    monkeypatch.setenv("PARLEY_MODEL_TIMEOUT_SECONDS", "7.5")
    assert gemini().timeout == 7.5
    settings = Settings.from_env()
    assert ModelConfig.from_settings(settings, "g", "google").api_key == KEY
    assert ModelConfig.from_settings(settings, "g", "google").base_url == fake.base_url
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")  # the SDK's switch to Vertex AI
    with pytest.raises(ValueError, match=r"GOOGLE_GENAI_USE_VERTEXAI is set .* unset it"):
        gemini()
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ValueError, match=r"GOOGLE_API_KEY is not set"):
        gemini()


async def test_usage_and_cache_reads_are_what_gemini_reported(fake: FakeGemini) -> None:
    model = gemini().bind_tools([add])
    view = [SystemMessage("You are Parley's agent. Be brief."), HumanMessage("2 + 3?")]
    fake.reply("Adding.", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}}])
    fake.reply("Five.")
    chunks = [c async for c in model.astream(view)]
    second = await model.ainvoke(view)

    first_body = fake.generate_requests[0].body
    assert first_body["systemInstruction"]["parts"] == [
        {"text": "You are Parley's agent. Be brief."}
    ]
    (declaration,) = first_body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "add"
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert isinstance(whole, AIMessageChunk) and whole.content == "Adding."
    (call,) = whole.tool_calls
    assert (call["name"], call["args"]) == ("add", {"a": 2, "b": 3})
    assert whole.additional_kwargs[GEMINI_SIGNATURES] == {call["id"]: signature_of("add")}
    first, again = fake.usage_reported
    assert "cachedContentTokenCount" not in first and again["cachedContentTokenCount"] > 0
    assert Usage.of_call(whole) == reported(fake, slice(0, 1))
    assert Usage.of_call(second) == reported(fake, slice(1, 2))


async def test_a_renamed_call_is_sent_back_with_its_thought_signature(fake: FakeGemini) -> None:
    """Parley renames a call (a subagent's, a rewound conversation's): the signature
    Gemini gave it follows, and reaches Gemini with the call."""
    fake.reply(tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}}])
    fake.reply("Three.")
    model = gemini().bind_tools([add])
    reply = await model.ainvoke([HumanMessage("1 + 2?")])
    renamed = _with_unique_ids(reply, "m-1", 1, set(), "helper-1")
    (call,) = renamed.tool_calls
    assert call["id"] != reply.tool_calls[0]["id"]
    assert renamed.additional_kwargs[GEMINI_SIGNATURES] == {call["id"]: signature_of("add")}
    result = ToolMessage("3", tool_call_id=call["id"], name="add")
    await model.ainvoke([HumanMessage("1 + 2?"), renamed, result])
    contents = fake.last_request.body["contents"]
    (part,) = contents[1]["parts"]
    assert part["functionCall"]["name"] == "add"
    assert part["thoughtSignature"] == signature_of("add")
    assert contents[2]["parts"][0]["functionResponse"]["name"] == "add"


UNAVAILABLE = "The model is overloaded. Please try again later."
TOKEN_LIMIT = (
    "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576)."
)


@pytest.mark.parametrize(
    ("code", "message", "options", "expected"),
    [
        (429, "You exceeded your current quota.", {"retry_delay": "2s"}, "retry"),
        (503, UNAVAILABLE, {}, "retry"),
        (500, "An internal error has occurred.", {}, "retry"),
        (504, "Deadline expired before operation could complete.", {}, "retry"),
        (503, UNAVAILABLE, {"in_stream": True}, "retry"),
        (429, "Resource has been exhausted.", {"in_stream": True, "retry_delay": "2s"}, "retry"),
        (400, "Request contains an invalid argument.", {}, "request"),
        (401, "Request had invalid authentication credentials.", {}, "request"),
        (403, "The caller does not have permission.", {}, "request"),
        (404, "models/gemini-test is not found for API version v1beta.", {}, "request"),
        (400, "Request contains an invalid argument.", {"in_stream": True}, "request"),
        (400, TOKEN_LIMIT, {}, "context"),
    ],
)
async def test_each_error_is_classified_as_parley_retries_it(
    fake: FakeGemini, code: int, message: str, options: dict[str, Any], expected: str
) -> None:
    fake.error(code, message, **options)
    with pytest.raises(Exception) as info:
        async for _ in gemini().bind_tools([add]).astream([HumanMessage("hi")]):
            pass
    failure = _model_failure(info.value)
    assert isinstance(failure, ApplicationError)
    assert "\n" not in failure.message and fake.attempts == 1  # the SDK did not retry
    if expected == "retry":
        assert failure.type == ErrorType.MODEL_TRANSIENT and not failure.non_retryable
        delay = timedelta(seconds=2) if "retry_delay" in options else None
        assert failure.next_retry_delay == delay
    elif expected == "request":
        assert failure.type == ErrorType.MODEL_REQUEST and failure.non_retryable
        assert f"(HTTP {code})" in failure.message
    else:
        assert failure.type == ErrorType.CONTEXT_LENGTH_EXCEEDED and failure.non_retryable
        assert "its window of 1048576 tokens" in failure.message
    if code == 404:
        assert "check PARLEY_MODEL and GOOGLE_BASE_URL" in failure.message


async def test_a_server_that_cannot_be_reached_is_retried(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_BASE_URL", "http://127.0.0.1:9")  # nothing listens
    with pytest.raises(Exception) as info:
        await gemini().ainvoke("hi")
    failure = _model_failure(info.value)
    assert failure.type == ErrorType.MODEL_TRANSIENT and not failure.non_retryable
    assert failure.message.startswith("could not reach the model provider")


async def test_a_server_too_slow_is_retried(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_MODEL_TIMEOUT_SECONDS", "0.5")
    fake.reply("Too late.", chunk_delay=2.0)
    with pytest.raises(Exception) as info:
        async for _ in gemini().astream("hi"):
            pass
    failure = _model_failure(info.value)
    assert failure.type == ErrorType.MODEL_TRANSIENT and not failure.non_retryable
    assert failure.message.startswith("the model provider did not answer in time")
    assert fake.attempts == 1


@pytest.mark.parametrize("wrong", [WRONG_KEY, "gateway-issued-credential-not-aiza-shaped-77"])
async def test_a_refused_key_is_named_and_never_repeated(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    """Google answers a bad key ``400 INVALID_ARGUMENT`` (reason ``API_KEY_INVALID``):
    Parley reads it as the refused key it is. Keys go by their shape (``AIza...``) or by
    being configured."""
    monkeypatch.setenv("GOOGLE_API_KEY", wrong)
    with pytest.raises(Exception) as info:
        await gemini().ainvoke("hi")
    assert wrong in str(info.value.__cause__ or info.value)  # the server echoes it
    failure = _model_failure(info.value)
    assert failure.type == ErrorType.MODEL_REQUEST and failure.non_retryable
    assert "refused the API key (check GOOGLE_API_KEY) (HTTP 401)" in failure.message
    assert wrong not in failure.message and wrong not in str(failure.details)
    assert "Revoked" not in failure.message and "not-aiza-shaped" not in failure.message


# --- through a worker -------------------------------------------------------------------


async def test_a_reply_streams_as_gemini_writes_it(parley_worker, fake: FakeGemini) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.05)
    turn, events, state = await streamed_turn(parley_worker, gemini())

    assert (turn.status, turn.reply) == ("completed", THIRTY_WORDS)
    request = fake.last_request
    assert request.path == f"/{API_VERSION}/models/gemini-test:streamGenerateContent?alt=sse"
    assert request.body["tools"][0]["functionDeclarations"]  # the catalogue
    (stream,) = fake.streams
    assert stream.completed and len(stream.text_deltas) == 30
    end = next(i for i, e in enumerate(events) if e["type"] == "TEXT_MESSAGE_END")
    deltas = [e["delta"] for e in events[:end] if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) >= 3  # several batches before the end
    assert "".join(deltas) == THIRTY_WORDS
    assert turn.usage == state.usage == reported(fake)


async def test_a_tool_call_through_the_gate(parley_worker, fake: FakeGemini) -> None:
    script_a_write(fake)
    sid = new_session()
    async with parley_worker(registry(), gemini()) as conversations:
        turn = await conversations.send(sid, USER, "write a record Q3")
        assert turn.status == "awaiting_approval"
        (pending,) = turn.pending
        assert (pending.name, pending.args) == ("write_record", {"title": "Q3"})
        assert runs_in(sid, "write_record") == []
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id=pending.tool_call_id, action="approve")]
        )
        state = await conversations.state(sid, USER)

    assert (done.status, done.reply) == ("completed", "Written: Q3.")
    assert [r["user_id"] for r in runs_in(sid, "write_record")] == [USER]
    sent = fake.last_request.body["contents"]
    assert [c["role"] for c in sent] == ["user", "model", "user"]
    calls = [p for p in sent[1]["parts"] if "functionCall" in p]
    assert [(p["functionCall"]["name"], p["functionCall"]["args"]) for p in calls] == [
        ("write_record", {"title": "Q3"})
    ]
    assert calls[0]["thoughtSignature"] == signature_of("write_record")
    (result,) = [p["functionResponse"] for p in sent[2]["parts"]]
    assert result["name"] == "write_record"
    assert result["response"] == {"written": "Q3", "by": USER}
    assert all(r.headers.get("x-goog-api-key") == KEY for r in fake.requests)
    assert state.usage == reported(fake)
    assert state.usage.cache_read_tokens == fake.usage_reported[1]["cachedContentTokenCount"] > 0


async def test_rate_limits_and_overloads_are_retried_by_temporal(
    parley_worker, fake: FakeGemini
) -> None:
    # The 503 inside a 200 stream and the plain one carry no delay: the policy's
    # intervals apply (1 s, then 2 s); the 429 asks for 1 s itself.
    fake.error(503, UNAVAILABLE, in_stream=True)
    fake.error(429, "Resource has been exhausted.", retry_delay="1s")
    fake.error(503, UNAVAILABLE)
    fake.reply("Hello after the storm.")
    turn, history = await one_turn(parley_worker, gemini())

    assert (turn.status, turn.reply) == ("completed", "Hello after the storm.")
    assert activity_attempts(history, CALL_MODEL) == [4]
    assert fake.attempts == 4 and fake.pending == 0


async def test_refusals_fail_the_turn_once_in_one_line(
    parley_worker, fake: FakeGemini, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.error(400, "* GenerateContentRequest.tools[0]: invalid function name")
    turn, history = await one_turn(parley_worker, gemini())
    assert turn.status == "failed" and turn.error is not None and "\n" not in turn.error
    assert "rejected the request (HTTP 400)" in turn.error
    assert activity_attempts(history, CALL_MODEL) == [1]

    monkeypatch.setenv("GOOGLE_API_KEY", WRONG_KEY)  # the server echoes it in its 400
    turn, history = await one_turn(parley_worker, gemini())
    assert turn.status == "failed" and turn.error is not None and "\n" not in turn.error
    assert "refused the API key (check GOOGLE_API_KEY)" in turn.error
    assert activity_attempts(history, CALL_MODEL) == [1]
    assert WRONG_KEY not in str(history.to_json()) and WRONG_KEY not in turn.error
    assert KEY not in str(history.to_json())
    assert "refused the API key" in caplog.text  # the worker logged the failure
    assert WRONG_KEY not in caplog.text and KEY not in caplog.text


def answer(request: RecordedRequest) -> Message:
    """Gemini's side: summarize when asked; else fetch the report a user message asks
    for, then say it was read."""
    body = request.body
    system = "".join(
        p.get("text", "") for p in (body.get("systemInstruction") or {}).get("parts", [])
    )
    if system == SUMMARY_INSTRUCTIONS:
        return Message(f"Summary: {len(json.dumps(body['contents']))} characters.")
    last = body["contents"][-1]["parts"]
    results = [p["functionResponse"] for p in last if "functionResponse" in p]
    if results:
        return Message(f"Read the report of {results[0]['name']}.")
    day = int(last[0]["text"].split()[-1])
    return Message(tool_calls=[{"name": "fetch_report", "args": {"day": day}}])


async def test_the_token_limit_compacts_and_the_turn_goes_on(
    parley_worker, fake: FakeGemini
) -> None:
    """No budget on the worker: Gemini's 400 "The input token count ... exceeds the
    maximum number of tokens allowed" is the only sign, and compacts the conversation,
    which goes on."""
    fake.context_window = 12_000
    fake.responder = answer
    state = await read_four_reports(parley_worker, gemini())

    assert fake.context_refusals >= 1
    compactions = [e for e in state.audit if e.event == "compacted"]
    assert compactions and all(c.detail["harder"] for c in compactions)
    assert len(compactions) == fake.context_refusals
