"""A real S3 API server for tests: ``moto`` in server mode (``moto[server]``) as its own
process on 127.0.0.1, its buckets, and a small real HTTP proxy in front of it that
answers chosen requests with 503s or cuts them mid-body; the ``s3`` fixture is one
``moto_server`` for a test module (registered as a plugin in tests/conftest.py). Client
side (runs in the test).
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import pytest

from parley.config.settings import Settings
from tests.support.ports import free_port

#: Credentials moto accepts (it checks none unless told to).
KEY_ID = "parley-test"
SECRET = "parley-test-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def env(self, **extra: str) -> dict[str, str]:
        """The AWS variables a worker, gateway or CLI process needs for this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION,
            **extra,
        }

    def settings(self, bucket: str, **extra: object) -> Settings:
        return Settings(
            payload_store=f"s3://{bucket}",
            aws_endpoint_url=self.endpoint,
            aws_region=REGION,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            **extra,  # type: ignore[arg-type]
        )

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One S3 server for the module (each test makes its own buckets)."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@contextmanager
def moto_server(log: Path, **env: str) -> Iterator[S3Server]:
    """``moto_server`` on a free port of 127.0.0.1 until the block ends; ``env`` is added
    to its environment (``INITIAL_NO_AUTH_ACTION_COUNT=0`` makes it check credentials)."""
    port = free_port()
    script = Path(sys.executable).parent / "moto_server"
    with log.open("ab") as out:
        server = subprocess.Popen(
            [str(script), "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, **env},
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                connection.request("GET", "/moto-api/")
                connection.getresponse().read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"moto_server did not start; see {log}") from None
                time.sleep(0.1)
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


class FaultyProxy:
    """A real HTTP proxy on 127.0.0.1 in front of an S3 server. ``fail(method, n)``
    answers the next ``n`` requests of ``method`` with 503 SlowDown; ``cut(method, n)``
    reads half of the next ``n`` request bodies and drops the connection. It counts what
    it injected and forwards everything else untouched."""

    def __init__(self, upstream: str) -> None:
        self._upstream = urlsplit(upstream)
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._cuts: dict[str, int] = {}
        self.injected: list[str] = []
        self.forwarded: dict[str, int] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, method: str, count: int) -> None:
        with self._lock:
            self._failures[method] = self._failures.get(method, 0) + count

    def cut(self, method: str, count: int) -> None:
        with self._lock:
            self._cuts[method] = self._cuts.get(method, 0) + count

    def _take(self, faults: dict[str, int], method: str) -> bool:
        with self._lock:
            if faults.get(method, 0) > 0:
                faults[method] -= 1
                return True
            return False

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        method = request.command
        if self._take(self._cuts, method):
            request.rfile.read(length // 2)
            self.injected.append(f"cut {method}")
            request.close_connection = True
            request.connection.shutdown(2)  # a connection reset mid-body
            return
        body = request.rfile.read(length) if length else b""
        if self._take(self._failures, method):
            self.injected.append(f"503 {method}")
            reply = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
            request.send_response(503)
            request.send_header("Content-Type", "application/xml")
            request.send_header("Content-Length", str(len(reply)))
            request.end_headers()
            if method != "HEAD":
                request.wfile.write(reply)
            return
        with self._lock:
            self.forwarded[method] = self.forwarded.get(method, 0) + 1
        upstream = http.client.HTTPConnection(
            self._upstream.hostname, self._upstream.port, timeout=60
        )
        headers = dict(request.headers.items())  # Host too: the request is signed with it
        upstream.request(method, request.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        request.send_response(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if method != "HEAD":
            request.wfile.write(data)
        upstream.close()

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
