"""A real webhook for the notification tests: an HTTP server on 127.0.0.1 that records
what the worker's ``notify`` activity POSTs and answers the statuses a test chooses."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Webhook:
    """A real HTTP server on 127.0.0.1 that records each POST and answers ``statuses`` in
    turn (the last one from then on). While ``release`` is clear it holds every answer."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = statuses
        self.requests: list[tuple[dict[str, str], Any]] = []
        self.answered: list[int] = []
        self.release = threading.Event()
        self.release.set()
        lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with lock:
                    hook.requests.append((headers, json.loads(raw)))
                    number = len(hook.requests)
                hook.release.wait(30)
                status = hook.statuses[min(number, len(hook.statuses)) - 1]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with lock:
                    hook.answered.append(status)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def __enter__(self) -> Webhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # no handler thread stays blocked
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
