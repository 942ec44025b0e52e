"""``openai:`` models: the real ChatOpenAI client against a local OpenAI-protocol server.

Every test goes over HTTP to ``FakeOpenAI`` on 127.0.0.1; the failures are classified by
``parley.activities.models.failures`` exactly as ``call_model`` will classify them.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from parley.activities.models.failures import (
    classify_model_error,
)
from parley.activities.models.openai_provider import build_openai_model
from parley.config.settings import Settings
from parley.contracts.errors import OVERLOAD_CODES_DEFAULT, ModelRequestError, TransientError
from parley.tools.loading import ModelConfig
from tests.support.openai_fake import OVERLOAD_2064, FakeOpenAI, error_body

API_KEY = "sk-test-0123456789abcdef"


pytestmark = pytest.mark.fake_openai(api_key=API_KEY)


def built(model_name: str = "fake-model") -> Any:
    """The model ``PARLEY_MODEL=openai:<model_name>`` makes from the environment."""
    return build_openai_model(ModelConfig.from_settings(Settings.from_env(), model_name))


def failure_of(messages: list[Any] | None = None, model_name: str = "fake-model") -> Exception:
    """Invoke a freshly built model once and return what it raised."""
    model = built(model_name)
    with pytest.raises(Exception) as info:
        model.invoke(messages or [HumanMessage("hi")])
    return info.value


# --- building the model -----------------------------------------------------------------


def test_missing_api_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match=r"OPENAI_API_KEY is not set.*set it"):
        built("gpt-4o-mini")


def test_sdk_retries_off_and_timeout_from_env(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = built()
    assert model.max_retries == 0
    assert model.root_client.max_retries == 0
    assert model.root_async_client.max_retries == 0
    assert model.request_timeout == 120
    assert model.streaming is False
    assert str(model.root_client.base_url).rstrip("/") == fake.base_url
    monkeypatch.setenv("PARLEY_MODEL_TIMEOUT_SECONDS", "7.5")
    assert built().request_timeout == 7.5
    monkeypatch.setenv("PARLEY_MODEL_TIMEOUT_SECONDS", "soon")
    with pytest.raises(ValueError, match="PARLEY_MODEL_TIMEOUT_SECONDS"):
        built()


def test_api_key_is_secret_in_the_model(fake: FakeOpenAI) -> None:
    model = built()
    assert API_KEY not in repr(model)
    assert API_KEY not in str(model.model_dump())


# --- a conversation over the wire -------------------------------------------------------


def test_tool_calls_come_back_parsed(fake: FakeOpenAI) -> None:
    fake.reply(
        tool_calls=[
            {"name": "add", "args": {"a": 2, "b": 3}, "id": "call_add"},
            {"name": "shout", "args": {"text": "hé"}, "id": "call_shout"},
        ]
    )
    result = built().invoke([SystemMessage("be brief"), HumanMessage("add 2 and 3")])
    assert isinstance(result, AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in result.tool_calls] == [
        ("add", {"a": 2, "b": 3}, "call_add"),
        ("shout", {"text": "hé"}, "call_shout"),
    ]
    assert result.response_metadata["finish_reason"] == "tool_calls"
    request = fake.last_request
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "fake-model"
    assert not request.body.get("stream")
    assert request.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "add 2 and 3"},
    ]


def test_tool_message_reaches_the_model(fake: FakeOpenAI) -> None:
    fake.reply(tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call_add"}])
    fake.reply("2 + 3 = 5")
    model = built()
    transcript: list[Any] = [HumanMessage("add 2 and 3")]
    first = model.invoke(transcript)
    transcript += [first, ToolMessage("5", tool_call_id="call_add", name="add")]
    second = model.invoke(transcript)

    assert second.content == "2 + 3 = 5"
    assert second.tool_calls == []
    assert fake.attempts == 2
    sent = fake.last_request.messages
    assert sent[1]["role"] == "assistant"
    assert sent[1]["tool_calls"] == [
        {
            "id": "call_add",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        }
    ]
    assert sent[2] == {"role": "tool", "content": "5", "tool_call_id": "call_add"}


async def test_async_conversation(fake: FakeOpenAI) -> None:
    fake.reply(tool_calls=[{"name": "add", "args": {"a": 1, "b": 1}, "id": "c1"}])
    fake.reply("two")
    model = built()
    first = await model.ainvoke([HumanMessage("1+1?")])
    assert first.tool_calls[0]["args"] == {"a": 1, "b": 1}
    second = await model.ainvoke([HumanMessage("1+1?"), first, ToolMessage("2", tool_call_id="c1")])
    assert second.content == "two"
    assert fake.last_request.messages[-1]["tool_call_id"] == "c1"


def test_bind_tools_with_a_langchain_tool(fake: FakeOpenAI) -> None:
    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    fake.reply(tool_calls=[{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "m1"}])
    model = built()
    result = model.bind_tools([multiply]).invoke("6 times 7?")

    assert result.tool_calls[0]["name"] == "multiply"
    assert multiply.invoke(result.tool_calls[0]["args"]) == 42
    (sent_tool,) = fake.last_request.body["tools"]
    assert sent_tool["type"] == "function"
    assert sent_tool["function"]["name"] == "multiply"
    assert sent_tool["function"]["description"] == "Multiply two integers."
    assert set(sent_tool["function"]["parameters"]["properties"]) == {"a", "b"}


def test_the_fake_speaks_sse_too(fake: FakeOpenAI) -> None:
    fake.reply("hel", tool_calls=[{"name": "add", "args": {"a": 1}, "id": "s1"}])
    model = ChatOpenAI(model="fake-model", base_url=fake.base_url, api_key=API_KEY, streaming=True)
    chunks = list(model.stream("hi"))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert fake.last_request.body["stream"] is True
    assert merged.content == "hel"
    assert merged.tool_calls[0]["args"] == {"a": 1}


# --- transient failures -----------------------------------------------------------------


def test_429_with_retry_after_is_transient(fake: FakeOpenAI) -> None:
    fake.error(
        429,
        error_body("Rate limit reached", type="requests", code="rate_limit_exceeded"),
        retry_after=3,
    )
    exc = failure_of()
    assert exc.response.headers["retry-after"] == "3"  # reachable on the SDK exception
    error = classify_model_error(exc)
    assert isinstance(error, TransientError)
    assert error.retry_after == 3
    assert error.http_status == 429
    assert "rate limit" in error.message
    assert fake.attempts == 1  # max_retries=0: one HTTP attempt per invoke


def test_retry_after_ms_wins(fake: FakeOpenAI) -> None:
    fake.error(429, headers={"retry-after-ms": "1500", "Retry-After": "9"})
    error = classify_model_error(failure_of())
    assert isinstance(error, TransientError)
    assert error.retry_after == 1.5


def test_retry_after_as_http_date(fake: FakeOpenAI) -> None:
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    fake.error(503, headers={"Retry-After": when})
    error = classify_model_error(failure_of())
    assert isinstance(error, TransientError)
    assert error.retry_after is not None and 25 <= error.retry_after <= 31


def test_a_burst_of_429s_then_success(fake: FakeOpenAI) -> None:
    """What Temporal does with max_retries=0: one HTTP attempt per activity attempt."""
    for _ in range(3):
        fake.error(429, retry_after=1)
    fake.reply("finally")
    model = built()
    waits = []
    for _attempt in range(10):
        try:
            result = model.invoke("hi")
            break
        except Exception as exc:
            error = classify_model_error(exc)
            assert isinstance(error, TransientError)
            waits.append(error.retry_after)
    assert result.content == "finally"
    assert waits == [1, 1, 1]
    assert fake.attempts == 4


@pytest.mark.parametrize("status", [400, 200])
def test_overload_code_2064_is_transient_whatever_the_status(fake: FakeOpenAI, status: int) -> None:
    fake.error(status, OVERLOAD_2064)
    exc = failure_of()
    error = classify_model_error(exc)
    assert isinstance(error, TransientError), (type(exc), exc)
    assert "overloaded" in error.message
    assert "2064" in error.message
    assert error.body == OVERLOAD_2064["error"]
    assert error.http_status == status
    assert fake.attempts == 1


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"type": "overloaded_error", "message": "Overloaded"}},
        {"error": {"code": "server_overloaded", "message": "try later"}},
        {"error": {"message": "The engine is currently overloaded, please try again"}},
    ],
)
def test_other_overload_bodies_on_a_400(fake: FakeOpenAI, body: dict[str, Any]) -> None:
    fake.error(400, body)
    assert isinstance(classify_model_error(failure_of()), TransientError)


def test_overload_codes_are_configurable(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().model_overload_codes == OVERLOAD_CODES_DEFAULT
    monkeypatch.setenv("PARLEY_MODEL_OVERLOAD_CODES", " 9999, Busy_Cluster ")
    assert Settings.from_env().model_overload_codes == frozenset({"9999", "busy_cluster"})
    fake.error(400, {"error": {"code": 9999, "message": "cluster busy"}})
    fake.error(400, {"error": {"code": "BUSY_CLUSTER", "message": "later"}})
    fake.error(400, OVERLOAD_2064)
    configured = Settings.from_env().model_overload_codes  # as the worker passes them
    assert isinstance(classify_model_error(failure_of(), overload_codes=configured), TransientError)
    assert isinstance(classify_model_error(failure_of(), overload_codes=configured), TransientError)
    assert isinstance(
        classify_model_error(failure_of(), overload_codes=configured), ModelRequestError
    )
    # An explicit set overrides the environment.
    fake.error(400, OVERLOAD_2064)
    error = classify_model_error(failure_of(), overload_codes=frozenset({"2064"}))
    assert isinstance(error, TransientError)


def test_a_number_containing_the_code_is_not_an_overload(fake: FakeOpenAI) -> None:
    fake.error(400, error_body("max_tokens must be at most 20640"))
    assert isinstance(classify_model_error(failure_of()), ModelRequestError)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529, 408, 425])
def test_server_errors_are_transient(fake: FakeOpenAI, status: int) -> None:
    fake.error(status, error_body("The server had an error", type="server_error"))
    error = classify_model_error(failure_of())
    assert isinstance(error, TransientError)
    assert error.http_status == status
    assert fake.attempts == 1


def test_non_json_5xx_is_transient(fake: FakeOpenAI) -> None:
    fake.error(502, b"<html>Bad Gateway</html>")
    error = classify_model_error(failure_of())
    assert isinstance(error, TransientError)
    assert error.http_status == 502


def test_connection_refused_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    error = classify_model_error(failure_of())
    assert isinstance(error, TransientError)
    assert error.http_status is None
    assert f"127.0.0.1:{port}" in error.message


def test_timeout_is_transient(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_MODEL_TIMEOUT_SECONDS", "0.3")
    fake.reply("too late", delay=2)
    error = classify_model_error(failure_of())
    assert isinstance(error, TransientError)
    assert "in time" in error.message
    assert fake.attempts == 1


# --- the turn fails ---------------------------------------------------------------------


def test_wrong_key_401_fails_without_leaking_the_key(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "sk-wrong-key-that-must-not-leak-42"
    monkeypatch.setenv("OPENAI_API_KEY", wrong)
    exc = failure_of()
    assert wrong in str(exc)  # the fake echoes it, as careless providers do
    error = classify_model_error(exc)
    assert isinstance(error, ModelRequestError)
    assert error.http_status == 401
    assert "the model provider refused the API key (check OPENAI_API_KEY) (HTTP 401)" in (
        error.message
    )
    assert wrong not in error.message
    assert wrong not in str(error.body)
    assert "wrong-key" not in error.message
    assert fake.attempts == 1


def test_404_model_not_found(fake: FakeOpenAI) -> None:
    fake.error(
        404,
        error_body("The model `nope` does not exist", code="model_not_found"),
    )
    error = classify_model_error(failure_of(model_name="nope"))
    assert isinstance(error, ModelRequestError)
    assert error.http_status == 404
    assert error.message.startswith("model not found")
    assert "`nope` does not exist" in error.message


@pytest.mark.parametrize("status", [403, 422])
def test_other_refusals_fail_the_turn(fake: FakeOpenAI, status: int) -> None:
    fake.error(status, error_body("no"))
    error = classify_model_error(failure_of())
    assert isinstance(error, ModelRequestError)
    assert error.http_status == status


def test_plain_400_fails_the_turn(fake: FakeOpenAI) -> None:
    fake.error(400, error_body("Invalid 'messages[1].role'", code="invalid_value"))
    error = classify_model_error(failure_of())
    assert isinstance(error, ModelRequestError)
    assert "rejected the request (HTTP 400)" in error.message


def test_context_length_exceeded(fake: FakeOpenAI) -> None:
    fake.error(
        400,
        error_body(
            "This model's maximum context length is 8192 tokens.",
            code="context_length_exceeded",
        ),
    )
    error = classify_model_error(failure_of())
    assert isinstance(error, ModelRequestError)
    assert error.message.startswith("context window exceeded")


def test_insufficient_quota_is_not_a_rate_limit(fake: FakeOpenAI) -> None:
    fake.error(
        429,
        error_body(
            "You exceeded your current quota", type="insufficient_quota", code="insufficient_quota"
        ),
    )
    error = classify_model_error(failure_of())
    assert isinstance(error, ModelRequestError)
    assert "quota" in error.message


def test_error_in_a_200_that_is_not_an_overload(fake: FakeOpenAI) -> None:
    fake.error(200, {"error": {"code": "1214", "message": "messages illegal"}})
    error = classify_model_error(failure_of())
    assert isinstance(error, ModelRequestError)
    assert "messages illegal" in error.message


def test_script_exhausted_is_a_clear_failure(fake: FakeOpenAI) -> None:
    error = classify_model_error(failure_of())
    assert isinstance(error, ModelRequestError)
    assert "no scripted response left" in error.message


# --- exceptions that never went through ChatOpenAI ----------------------------------


def test_plain_and_httpx_errors() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions?api_key=sk-x")
    assert isinstance(classify_model_error(TimeoutError()), TransientError)
    assert isinstance(classify_model_error(ConnectionRefusedError(111, "refused")), TransientError)
    assert isinstance(
        classify_model_error(httpx.ReadTimeout("slow", request=request)), TransientError
    )
    connect = classify_model_error(httpx.ConnectError("refused", request=request))
    assert isinstance(connect, TransientError)
    assert "sk-x" not in connect.message

    response = httpx.Response(503, headers={"Retry-After": "4"}, request=request, json={})
    status_error = httpx.HTTPStatusError("503", request=request, response=response)
    error = classify_model_error(status_error)
    assert isinstance(error, TransientError)
    assert (error.http_status, error.retry_after) == (503, 4)

    response = httpx.Response(401, request=request, json={"error": {"message": "bad key"}})
    error = classify_model_error(httpx.HTTPStatusError("401", request=request, response=response))
    assert isinstance(error, ModelRequestError)


def test_unrecognised_errors_are_left_to_the_caller() -> None:
    assert classify_model_error(ValueError("bad")) is None
    assert classify_model_error(KeyError("x")) is None
    assert classify_model_error(TypeError("y")) is None


def test_parley_errors_pass_through() -> None:
    error = TransientError("already classified", retry_after=2)
    assert classify_model_error(error) is error


def test_a_409_means_the_same_for_a_model_and_a_tool(fake: FakeOpenAI) -> None:
    """One table (``parley.contracts.errors.INPUT_STATUSES``): a conflict is not retried."""
    fake.error(409, error_body("conflict", type="invalid_request_error"))
    assert isinstance(classify_model_error(failure_of()), ModelRequestError)
