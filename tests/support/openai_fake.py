"""A real HTTP server speaking the OpenAI chat-completions protocol, for tests.

``FakeOpenAI`` listens on 127.0.0.1 (a free port) in a background thread and answers
``POST /v1/chat/completions`` from a queue of scripted responses: assistant replies
(content and/or tool calls, in OpenAI wire format; streamed as SSE when the client asks
for ``stream: true``) or errors (any status, JSON body, headers such as ``Retry-After``).
It records every request (headers, JSON body) and checks the Bearer API key, answering
a wrong one with an OpenAI-style 401 that echoes the presented key (as a careless
provider might) so tests can check that Parley never repeats it.

    with FakeOpenAI(api_key="sk-test") as fake:
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
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.openai_wire import (
    OVERLOAD_2064,
    chunks,
    completion,
    error_body,
    wire_tool_calls,
)

__all__ = ["OVERLOAD_2064", "FakeOpenAI", "error_body"]


@dataclass
class RecordedRequest:
    """One HTTP request the fake received; ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []


@dataclass
class ScriptedReply:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    delay: float = 0.0


@dataclass
class ScriptedError:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class FakeOpenAI:
    """A scripted OpenAI-compatible server; use as a context manager or start()/stop()."""

    def __init__(self, *, api_key: str | None = "sk-fake-key") -> None:
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
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
    ) -> FakeOpenAI:
        """Queue an assistant message; tool calls are ``{"name", "args", "id"?}`` dicts.

        ``delay`` (seconds) holds the answer back, to provoke client timeouts.
        """
        with self._lock:
            self._script.append(
                ScriptedReply(content, list(tool_calls or []), finish_reason, delay)
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

    def _next(self) -> ScriptedReply | ScriptedError:
        with self._lock:
            if self._script:
                return self._script.popleft()
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
        self._record(body)
        if not self._authorised():
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, error_body(f"no route {self.path}"))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_json(400, error_body("'messages' is a required property"))
            return
        scripted = self.owner._next()
        if scripted.delay:
            time.sleep(scripted.delay)
        if isinstance(scripted, ScriptedError):
            self._send_json(scripted.status, scripted.body, scripted.headers)
            return
        model = str(body.get("model", "fake-model"))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(self._chunks(scripted, model, include_usage))
        else:
            self._send_json(200, self._completion(scripted, model))

    # --- protocol ------------------------------------------------------------------

    def _record(self, body: Any) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.owner.requests.append(RecordedRequest(self.command, self.path, headers, body))

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

    def _completion(self, reply: ScriptedReply, model: str) -> dict[str, Any]:
        n = self.owner._next_id()
        calls = wire_tool_calls(reply.tool_calls, n)
        return completion(n, model, reply.content, calls, reply.finish_reason)

    def _chunks(
        self, reply: ScriptedReply, model: str, include_usage: bool
    ) -> list[dict[str, Any]]:
        n = self.owner._next_id()
        calls = wire_tool_calls(reply.tool_calls, n)
        return chunks(n, model, reply.content, calls, reply.finish_reason, include_usage)

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: list[dict[str, Any]]) -> None:
        events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
        data = "".join(events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
