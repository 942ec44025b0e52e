"""A real OTLP/HTTP trace receiver on 127.0.0.1, for the traces test: it takes what an
OpenTelemetry SDK's ``OTLPSpanExporter`` posts to ``/v1/traces`` (protobuf, maybe
gzipped), decodes it with ``opentelemetry-proto`` and keeps each span with its service,
its events and its status message."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Each event's name and attributes (an exception's message and stack trace).
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status_message: str = ""


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` listens; ``receiver.endpoint`` is what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set to; ``receiver.spans`` what arrived."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name", "")),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=[
                                (e.name, {a.key: _value(a.value) for a in e.attributes})
                                for e in span.events
                            ],
                            status_message=span.status.message,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(received)

    def in_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
