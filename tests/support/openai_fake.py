"""A real HTTP server speaking the OpenAI chat-completions protocol, for tests.

``FakeOpenAI`` listens on 127.0.0.1 (a free port) in a background thread and answers
``POST /v1/chat/completions`` from a queue of scripted responses: assistant replies
(content and/or tool calls, in OpenAI wire format) or errors (any status, JSON body,
headers such as ``Retry-After``). When the script is empty a ``responder`` may answer.
It records every request (headers, JSON body, input tokens) and checks the Bearer API
key, answering a wrong one with an OpenAI-style 401 that echoes the presented key (as a
careless provider might) so tests can check that Parley never repeats it.

As a provider does, and so the real ``langchain-openai`` client code runs:

- ``stream: true`` is answered with SSE ``chat.completion.chunk`` events, sent as they
  are made (chunked transfer): a text delta per word and tool-call arguments in pieces,
  ``chunk_delay`` seconds before each (per server, or per reply). ``streams`` records
  what each stream wrote and when.
- usage (input tokens counted from the request, output from the reply; see
  ``tests.support.openai_wire``) is in every whole reply, and in a final chunk of a
  stream when the request sets ``stream_options.include_usage``; ``usage_reported``
  lists each usage the fake sent.
- with ``context_window`` set, a request whose input (plus its ``max_tokens``) passes it
  is answered ``400 context_length_exceeded`` without using up the script.
- a scripted error in a ``200`` to a stream is sent as an SSE event, as providers send
  an error mid-stream.
- with ``ignore_stream`` set, ``stream: true`` is ignored, as some providers do: the
  reply is one JSON ``chat.completion`` body (``application/json``), usage included.

    with FakeOpenAI(api_key="sk-test", chunk_delay=0.1, context_window=32_000) as fake:
        fake.reply(tool_calls=[{"name": "add", "args": {"a": 1}, "id": "call_1"}])
        fake.error(429, retry_after=3)
        fake.reply("done")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        ...
        assert fake.attempts == 3

The server, its script, records and streams are ``tests.support.fake_provider``'s; this
module is the protocol alone.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.fake_provider import FakeProvider, ProviderHandler
from tests.support.openai_script import (
    RecordedRequest,
    Responder,
    ScriptedError,
    ScriptedReply,
    StreamRecord,
)
from tests.support.openai_wire import (
    OVERLOAD_2064,
    TokenCounter,
    approximate_tokens,
    chunks,
    completion,
    context_length_exceeded,
    error_body,
    reply_tokens,
    usage,
    wire_tool_calls,
)

__all__ = [
    "OVERLOAD_2064",
    "FakeOpenAI",
    "RecordedRequest",
    "ScriptedError",
    "ScriptedReply",
    "StreamRecord",
    "error_body",
]


class FakeOpenAI(FakeProvider):
    """A scripted OpenAI-compatible server; use as a context manager or start()/stop()."""

    url_path = "/v1"

    def __init__(
        self,
        *,
        api_key: str | None = "sk-fake-key",
        chunk_delay: float = 0.0,
        context_window: int | None = None,
        token_counter: TokenCounter = approximate_tokens,
        responder: Responder | None = None,
        ignore_stream: bool = False,
    ) -> None:
        super().__init__(
            api_key=api_key,
            chunk_delay=chunk_delay,
            context_window=context_window,
            responder=responder,
        )
        self.ignore_stream = ignore_stream
        self.token_counter = token_counter

    # --- scripting -----------------------------------------------------------------

    def reply(
        self,
        content: str | None = None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        finish_reason: str | None = None,
        delay: float = 0.0,
        chunk_delay: float | None = None,
    ) -> FakeOpenAI:
        """Queue an assistant message; tool calls are ``{"name", "args", "id"?}`` dicts.

        ``delay`` (seconds) holds the answer back, to provoke client timeouts;
        ``chunk_delay`` paces this reply's streamed deltas (the server's otherwise).
        """
        return self._queue(
            ScriptedReply(content, list(tool_calls or []), finish_reason, delay, chunk_delay)
        )

    def error(
        self,
        status: int,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        retry_after: float | None = None,
        delay: float = 0.0,
    ) -> FakeOpenAI:
        """Queue an error response (``status`` may be 200 for an error-in-a-200 body)."""
        if body is None:
            body = error_body(f"scripted error {status}", type="server_error")
        all_headers = dict(headers or {})
        if retry_after is not None:
            all_headers["Retry-After"] = _number(retry_after)
        return self._queue(ScriptedError(status, body, all_headers, delay))

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The requests to ``/v1/chat/completions`` (``attempts`` counts them)."""
        return self.calls

    def _is_call(self, path: str) -> bool:
        return path.rstrip("/").endswith("/chat/completions")

    def reported_total(self) -> dict[str, int]:
        """The sum of every usage the fake reported, by field."""
        keys = ("prompt_tokens", "completion_tokens", "total_tokens")
        return {key: sum(u[key] for u in self.usage_reported) for key in keys}

    # --- serving -------------------------------------------------------------------

    def _exhausted(self) -> ScriptedError:
        return ScriptedError(
            400,
            error_body(
                "FakeOpenAI: no scripted response left for this request",
                code="fake_script_exhausted",
            ),
        )


class _Handler(ProviderHandler):
    owner: FakeOpenAI
    stream_headers = (("Cache-Control", "no-cache"),)
    stream_end = b"data: [DONE]\n\n"

    def do_GET(self) -> None:
        self._record(None)
        if not self._authorised():
            return
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": []})
        else:
            self._send_json(404, error_body(f"no route {self.path}"))

    def _answer(self, request: RecordedRequest) -> None:
        body = request.body
        if not self.owner._is_call(self.path):
            self._send_json(404, error_body(f"no route {self.path}"))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_json(400, error_body("'messages' is a required property"))
            return
        request.input_tokens = self.owner.token_counter(body["messages"], body.get("tools"))
        if self._past_window(request.input_tokens, body):
            return
        scripted = self.owner._next(request)
        if scripted.delay:
            time.sleep(scripted.delay)
        if isinstance(scripted, ScriptedError):
            if scripted.status == 200 and body.get("stream") and isinstance(scripted.body, dict):
                # An error inside a 200 to a stream: one SSE event carrying it, as
                # providers send errors mid-stream (the openai SDK raises APIError).
                self._send_stream(iter([(False, scripted.body)]), 0.0)
                return
            self._send_json(scripted.status, scripted.body, scripted.headers)
            return
        model = str(body.get("model", "fake-model"))
        n = self.owner._next_id()
        calls = wire_tool_calls(scripted.tool_calls, n)
        billed = usage(request.input_tokens, reply_tokens(scripted.content, calls))
        if body.get("stream") and not self.owner.ignore_stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = chunks(
                n,
                model,
                scripted.content,
                calls,
                scripted.finish_reason,
                self.owner._report(billed) if include_usage else None,
            )
            self._send_stream(events, self._pace(scripted))
        else:
            whole = completion(n, model, scripted.content, calls, scripted.finish_reason, billed)
            self._send_json(200, whole)
            self.owner._report(billed)

    def _past_window(self, input_tokens: int, body: dict[str, Any]) -> bool:
        """Answer ``400 context_length_exceeded`` if the request would not fit (its input
        and the room it asks for the reply, as OpenAI counts it)."""
        room = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        if not self.owner._past_window(input_tokens + room):
            return False
        self._send_json(
            400, context_length_exceeded(self.owner.context_window, input_tokens + room)
        )
        return True

    # --- protocol ------------------------------------------------------------------

    def _authorised(self) -> bool:
        expected = self.owner.api_key
        if expected is None:
            return True
        presented = self.headers.get("Authorization", "")
        if presented == f"Bearer {expected}":
            return True
        key = presented.removeprefix("Bearer ").strip()
        self._send_json(
            401,
            error_body(
                f"Incorrect API key provided: {key}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            ),
        )
        return False

    def _sse(self, event: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(event)}\n\n".encode()

    def _text_of(self, event: dict[str, Any]) -> str:
        return "".join(choice["delta"].get("content") or "" for choice in event["choices"])


FakeOpenAI.handler = _Handler


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
