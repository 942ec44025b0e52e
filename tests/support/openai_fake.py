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

    with FakeOpenAI(api_key="sk-test", chunk_delay=0.1, context_window=32_000) as fake:
        fake.reply(tool_calls=[{"name": "add", "args": {"a": 1}, "id": "call_1"}])
        fake.error(429, retry_after=3)
        fake.reply("done")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        ...
        assert fake.attempts == 3
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class FakeOpenAI:
    """A scripted OpenAI-compatible server; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        api_key: str | None = "sk-fake-key",
        chunk_delay: float = 0.0,
        context_window: int | None = None,
        token_counter: TokenCounter = approximate_tokens,
        responder: Responder | None = None,
    ) -> None:
        self.api_key = api_key
        self.chunk_delay = chunk_delay
        self.context_window = context_window
        self.token_counter = token_counter
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.streams: list[StreamRecord] = []
        self.usage_reported: list[dict[str, int]] = []
        #: Requests answered ``context_length_exceeded`` because of ``context_window``.
        self.context_refusals = 0
        self._stopping = threading.Event()
        self._script: deque[ScriptedReply | ScriptedError] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0

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
        with self._lock:
            self._script.append(
                ScriptedReply(content, list(tool_calls or []), finish_reason, delay, chunk_delay)
            )
        return self

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
        with self._lock:
            self._script.append(ScriptedError(status, body, all_headers, delay))
        return self

    @property
    def pending(self) -> int:
        """Scripted responses not yet served."""
        with self._lock:
            return len(self._script)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    @property
    def attempts(self) -> int:
        """HTTP requests made to ``/v1/chat/completions`` (one per client attempt)."""
        return len(self.chat_requests)

    @property
    def last_request(self) -> RecordedRequest:
        return self.chat_requests[-1]

    def reported_total(self) -> dict[str, int]:
        """The sum of every usage the fake reported, by field."""
        keys = ("prompt_tokens", "completion_tokens", "total_tokens")
        return {key: sum(u[key] for u in self.usage_reported) for key in keys}

    # --- lifecycle -----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAI:
        if self._server is not None:
            return self
        fake = self

        class Handler(_Handler):
            owner = fake

        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeOpenAI",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # a stream being paced stops waiting
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> FakeOpenAI:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()

    # --- serving -------------------------------------------------------------------

    def _next(self, request: RecordedRequest) -> ScriptedReply | ScriptedError:
        with self._lock:
            if self._script:
                return self._script.popleft()
        answer = self.responder(request) if self.responder is not None else None
        if answer is not None:
            return answer
        return ScriptedError(
            400,
            error_body(
                "FakeOpenAI: no scripted response left for this request",
                code="fake_script_exhausted",
            ),
        )

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _reported(self, billed: dict[str, int]) -> dict[str, int]:
        with self._lock:
            self.usage_reported.append(billed)
        return billed


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its timeout fired): nothing to answer

    def do_GET(self) -> None:
        self._record(None)
        if not self._authorised():
            return
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": []})
        else:
            self._send_json(404, error_body(f"no route {self.path}"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = self._record(body)
        if not self._authorised():
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
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
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = chunks(
                n,
                model,
                scripted.content,
                calls,
                scripted.finish_reason,
                self.owner._reported(billed) if include_usage else None,
            )
            pace = self.owner.chunk_delay if scripted.chunk_delay is None else scripted.chunk_delay
            self._send_stream(events, pace)
        else:
            whole = completion(n, model, scripted.content, calls, scripted.finish_reason, billed)
            self._send_json(200, whole)
            self.owner._reported(billed)

    def _past_window(self, input_tokens: int, body: dict[str, Any]) -> bool:
        """Answer ``400 context_length_exceeded`` if the request would not fit (its input
        and the room it asks for the reply, as OpenAI counts it)."""
        window = self.owner.context_window
        if window is None:
            return False
        room = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if input_tokens + int(room) <= window:
            return False
        with self.owner._lock:
            self.owner.context_refusals += 1
        self._send_json(400, context_length_exceeded(window, input_tokens + int(room)))
        return True

    # --- protocol ------------------------------------------------------------------

    def _record(self, body: Any) -> RecordedRequest:
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = RecordedRequest(self.command, self.path, headers, body)
        self.owner.requests.append(request)
        return request

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

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, events: Any, pace: float) -> None:
        """Write each event as soon as it is made (chunked transfer), waiting ``pace``
        seconds before each delta, as a provider writes tokens while it generates."""
        record = StreamRecord()
        with self.owner._lock:
            self.owner.streams.append(record)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for is_delta, event in events:
                if is_delta and pace and self.owner._stopping.wait(pace):
                    return  # the server is stopping
                self._write_chunk(f"data: {json.dumps(event)}\n\n".encode())
                if is_delta:
                    record.delta_times.append(time.monotonic())
                    for choice in event["choices"]:
                        text = choice["delta"].get("content")
                        if text:
                            record.text_deltas.append(text)
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            record.completed = True
        finally:
            record.done.set()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
