"""What every fake model provider of the tests shares. Test support: the provider's side
of the wire, for the real client libraries (langchain-openai, the ``anthropic`` and
``google-genai`` SDKs) to talk to.

``FakeProvider`` is a real HTTP server on 127.0.0.1 (a free port, served by a background
thread; a context manager, plain or async, or ``start()``/``stop()``) that answers from a
queue of scripted answers, or from a ``responder`` when the queue is empty. It records
every request and every stream, the usage it reported and the requests it refused for
its ``context_window``, and keeps a prompt cache (the prefixes it has seen).
``ProviderHandler`` reads and records each request and writes JSON bodies and SSE
streams (chunked transfer, written as they are made, ``pace`` seconds before each delta,
stopped when the server stops).

``openai_fake``, ``anthropic_fake`` and ``gemini_fake`` subclass both with their
protocol alone: the paths, the wire format, the error bodies, the header with the key.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.support.openai_script import RecordedRequest, StreamRecord

#: ``(is a delta, event)``: what a stream writes; deltas are paced and timed.
Event = tuple[bool, Any]


class FakeProvider:
    """A scripted provider server; a subclass names its ``handler`` and its protocol."""

    #: The request handler that speaks the protocol.
    handler: type[ProviderHandler]
    #: The path ``base_url`` ends with (the client adds the rest).
    url_path = ""
    #: The key expected when ``api_key`` is None.
    default_api_key: str | None = None

    def __init__(
        self,
        *,
        api_key: str | None = None,
        chunk_delay: float = 0.0,
        context_window: int | None = None,
        responder: Callable[[RecordedRequest], Any] | None = None,
    ) -> None:
        self.api_key = self.default_api_key if api_key is None else api_key
        self.chunk_delay = chunk_delay
        self.context_window = context_window
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.streams: list[StreamRecord] = []
        self.usage_reported: list[dict[str, int]] = []
        #: Requests refused because their input passed ``context_window``.
        self.context_refusals = 0
        self._script: deque[Any] = deque()
        self._cache: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0

    # --- scripting -----------------------------------------------------------------

    def _queue(self, answer: Any) -> Self:
        with self._lock:
            self._script.append(answer)
        return self

    def clear(self) -> None:
        """Forget the script, the records and the prompt cache (a server shared by
        several tests starts each one afresh)."""
        with self._lock:
            self._script.clear()
            self._cache.clear()
            self.requests.clear()
            self.streams.clear()
            self.usage_reported.clear()
            self.context_refusals = 0
        self.responder = None
        self.context_window = None

    @property
    def pending(self) -> int:
        """Scripted answers not yet served."""
        with self._lock:
            return len(self._script)

    def _is_call(self, path: str) -> bool:
        """Whether a request to ``path`` asks the model for an answer."""
        raise NotImplementedError

    @property
    def calls(self) -> list[RecordedRequest]:
        """The requests that asked the model for an answer."""
        return [r for r in self.requests if self._is_call(r.path)]

    @property
    def attempts(self) -> int:
        """Requests for an answer (one per client attempt)."""
        return len(self.calls)

    @property
    def last_request(self) -> RecordedRequest:
        return self.calls[-1]

    # --- lifecycle -----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not running: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.url_path}"

    def start(self) -> Self:
        if self._server is not None:
            return self
        handler = type("Handler", (self.handler,), {"owner": self})
        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()

    # --- serving -------------------------------------------------------------------

    def _next(self, request: RecordedRequest) -> Any:
        """The next scripted answer, else the responder's, else ``_exhausted()``."""
        with self._lock:
            if self._script:
                return self._script.popleft()
        answer = self.responder(request) if self.responder is not None else None
        return answer if answer is not None else self._exhausted()

    def _exhausted(self) -> Any:
        """The protocol's error for a request no answer is left for."""
        raise NotImplementedError

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _report(self, usage: dict[str, int]) -> dict[str, int]:
        """Record ``usage`` as reported to the client, and give it back."""
        with self._lock:
            self.usage_reported.append(usage)
        return usage

    def _past_window(self, tokens: int) -> bool:
        """Whether ``tokens`` pass ``context_window`` (then the request is refused)."""
        if self.context_window is None or tokens <= self.context_window:
            return False
        with self._lock:
            self.context_refusals += 1
        return True

    def _seen(self, prefix: str) -> bool:
        """Whether the prompt cache holds ``prefix`` (it does from now on)."""
        with self._lock:
            hit = prefix in self._cache
            self._cache.add(prefix)
        return hit


class ProviderHandler(BaseHTTPRequestHandler):
    """One request to a ``FakeProvider``: a subclass checks the key (``_authorised``)
    and answers (``_answer``), framing its stream events (``_sse``)."""

    owner: Any  # the FakeProvider subclass serving
    protocol_version = "HTTP/1.1"
    json_type = "application/json"
    #: Headers of a stream's response beside its type and transfer encoding.
    stream_headers: tuple[tuple[str, str], ...] = ()
    #: What a stream writes after its last event.
    stream_end = b""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its timeout fired): nothing to answer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = self._record(body)
        if self._authorised():
            self._answer(request)

    def _authorised(self) -> bool:
        """Whether the request carries the key; if not, refuse it as the provider does."""
        raise NotImplementedError

    def _answer(self, request: RecordedRequest) -> None:
        raise NotImplementedError

    def _record(self, body: Any) -> RecordedRequest:
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = RecordedRequest(self.command, self.path, headers, body)
        self.owner.requests.append(request)
        return request

    def _pace(self, answer: Any) -> float:
        """Seconds before each delta of ``answer``'s stream: its own, else the server's."""
        return self.owner.chunk_delay if answer.chunk_delay is None else answer.chunk_delay

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.json_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(
        self,
        events: Iterable[Event],
        pace: float,
        on_complete: Callable[[], Any] | None = None,
    ) -> None:
        """Write each event as soon as it is made (chunked transfer), waiting ``pace``
        seconds before each delta, as a provider writes tokens while it generates;
        ``on_complete`` runs once the whole stream is written."""
        record = StreamRecord()
        with self.owner._lock:
            self.owner.streams.append(record)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        for name, value in self.stream_headers:
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for is_delta, event in events:
                if is_delta and pace and self.owner._stopping.wait(pace):
                    return  # the server is stopping
                self._write_chunk(self._sse(event))
                if is_delta:
                    record.delta_times.append(time.monotonic())
                    text = self._text_of(event)
                    if text:
                        record.text_deltas.append(text)
            if self.stream_end:
                self._write_chunk(self.stream_end)
            self.wfile.write(b"0\r\n\r\n")
            record.completed = True
            if on_complete is not None:
                on_complete()
        finally:
            record.done.set()

    def _sse(self, event: Any) -> bytes:
        """``event`` as the protocol frames it in its stream."""
        raise NotImplementedError

    def _text_of(self, event: Any) -> str | None:
        """The text a delta event carries, if any."""
        return None

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
