"""Running the plans service: in the foreground (``parley plans-service``) or in a
background thread (``parley dev``, tests)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from parley.services.plans.app import create_app


def serve(host: str, port: int, db_path: Path, api_key: str) -> None:
    """Run the service in the foreground (``parley plans-service``)."""
    uvicorn.run(create_app(db_path, api_key), host=host, port=port, log_level="info")


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on ``host`` (port 0: a free one).

    For ``parley dev`` and tests: ``with BackgroundServer(app) as server: server.url``.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        # No handlers of uvicorn's own: in `parley dev` it shares the process's loggers
        # with the gateway, whose lines go through the process's redacting handlers.
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, log_config=None
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
