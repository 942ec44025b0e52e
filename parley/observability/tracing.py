"""Traces: OpenTelemetry through ``temporalio.contrib.opentelemetry``, off unless asked.

Client side (the CLI, the gateway and the worker's processes set it up); the spans it
adds are made in activities (``model_span``, ``tool_span``), never in workflow code:
the workflow's own spans come from the SDK's interceptor, replay-safe.

One trace follows a turn: the gateway's request span (or, from the CLI, the client's
``StartWorkflowUpdate`` span) → the workflow's ``HandleUpdate`` → each activity's
``StartActivity``/``RunActivity`` → Parley's ``chat <model>`` span (GenAI semantic
conventions: ``gen_ai.usage.input_tokens``/``output_tokens``) and
``execute_tool <name>`` span. A turn runs inside its update's handler, and the SDK's
``OpenTelemetryPlugin`` takes the handler's context from the update's headers, so the
turn's activities join the trace of the request that started the turn, not the
conversation's start weeks before. (The older ``TracingInterceptor`` parents every
workflow span under the workflow's start.)

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``) is set
(``Settings.otlp_traces_url``): spans go by OTLP/HTTP in batches to that collector, under
the service name ``OTEL_SERVICE_NAME`` or ``parley-<role>`` (both read by ``Settings``);
the exporter reads the other standard ``OTEL_EXPORTER_OTLP_*`` variables (headers,
timeout) itself, as OpenTelemetry defines them. Otherwise
nothing is installed and the span helpers are OpenTelemetry's no-ops. A program that
embeds Parley and has its own provider calls ``use(provider)`` before connecting.

No secret reaches a span. A request's span names its route template and nothing of its
URL (``route_only``: ``http.target``, ``http.url``, ``url.path``, ``url.full`` and
``url.query`` become ``/links/{token}``, never the token, nor a query string); captured
headers that carry credentials are ``[REDACTED]`` (``SECRET_HEADERS``); and every span
exported passes through ``redact`` (``RedactingExporter``: its name, attributes, events
and status), which knows the process's secrets (``remember_config`` of its Settings) and
what is shaped like one, an approval link's token among them. A provider a program
brings with ``use`` gets the first two; the exporter is its own to choose.

A command (role ``cli``) never lets a collector that is down into its output: the
exporter's log lines ("Failed to export spans batch", written from its own thread,
mid-reply) are kept, not printed, and ``shutdown`` gives one line instead, once the
command is done; it exports what is left within ``CLI_FLUSH_SECONDS``, and not at all
once an export has failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from parley.config.settings import Settings
from parley.observability.redaction import REDACTED, redact, remember_config

TRACER_NAME = "parley"

_provider: Any = None  # the provider traces go to, once installed (None: tracing off)
#: The loggers an OTLP exporter and its batch processor write to from their thread.
EXPORT_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal")
#: How long a command may take, as it exits, to export the spans still batched.
CLI_FLUSH_SECONDS = 3.0


class _ExportProblems(logging.Handler):
    """A command's exporter log lines, kept: the first failure's, for one line at exit."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(logging.WARNING)
        self.endpoint = endpoint
        self.problem: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.problem is None:
            why = "connection refused" if "refused" in record.getMessage() else "no answer"
            self.problem = (
                f"traces were not exported: the collector at {self.endpoint} did not take "
                f"them ({why}); check OTEL_EXPORTER_OTLP_ENDPOINT"
            )


_cli_exports: _ExportProblems | None = None


def use(provider: Any) -> None:
    """Trace to ``provider`` (an SDK ``TracerProvider``, made with
    ``temporalio.contrib.opentelemetry.create_tracer_provider`` so that workflow spans
    are replay-safe) from now on: it becomes the global provider unless one is set
    already (OpenTelemetry takes one per process), and clients connected after this
    carry the tracing plugin. ``None``: clients connected after this carry none."""
    global _provider
    if provider is not None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
        logging.getLogger("opentelemetry.context").addFilter(_evicted_workflow_detach)
    _provider = provider


def _evicted_workflow_detach(record: logging.LogRecord) -> bool:
    """Drop OpenTelemetry's "Failed to detach context" traceback for a workflow the
    worker evicts from its cache: the run's coroutine is closed (``GeneratorExit``) in
    another context than the one its span was attached in, which is harmless (the span
    is not ended on eviction) and logged at ERROR once per eviction
    (temporalio/sdk-python#441, fixed for the older interceptor only)."""
    if record.getMessage() != "Failed to detach context" or not record.exc_info:
        return True
    error = record.exc_info[1]
    return not (isinstance(error, ValueError) and "different Context" in str(error))


def configure(settings: Settings, role: str) -> None:
    """Install the OTLP exporter when ``settings`` ask for traces and none is installed."""
    if _provider is not None or not settings.otlp_traces_url:
        return
    remember_config(settings)  # its secrets are redacted from every span it exports
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    name = settings.otel_service_name or f"parley-{role}"
    provider = create_tracer_provider(resource=Resource.create({"service.name": name}))
    exporter = OTLPSpanExporter(endpoint=settings.otlp_traces_url, timeout=_timeout(role))
    provider.add_span_processor(BatchSpanProcessor(RedactingExporter(exporter)))
    if role == "cli":
        _keep_export_lines(settings.otlp_traces_url)
    use(provider)


def _keep_export_lines(endpoint: str) -> None:
    """A command's exporter logs to nobody's terminal: its lines are kept (the first
    failure becomes ``shutdown``'s line)."""
    global _cli_exports
    _cli_exports = _ExportProblems(endpoint)
    for name in EXPORT_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(_cli_exports)
        logger.propagate = False


def shutdown() -> str | None:
    """Export the spans still batched and stop exporting: the CLI calls it before it
    ends the process with ``os._exit``, which skips the provider's own ``atexit``. A
    command waits at most ``CLI_FLUSH_SECONDS``, and not at all once an export failed;
    what went wrong is the returned line (None: nothing did)."""
    if _provider is None:
        return None
    if _cli_exports is None:
        _provider.shutdown()
        return None
    if _cli_exports.problem is None:  # a collector that answered may take the rest
        flushing = threading.Thread(target=_provider.shutdown, daemon=True)
        flushing.start()
        flushing.join(CLI_FLUSH_SECONDS)
    return _cli_exports.problem


def _timeout(role: str) -> float | None:
    """A command exports its spans as it exits: with a collector down, it waits 2 s,
    not the exporter's 10 (None: the exporter's own, from ``OTEL_EXPORTER_OTLP_TIMEOUT``)."""
    return 2.0 if role == "cli" else None


def plugins() -> list[Any]:
    """The client plugins that carry traces across Temporal (none while tracing is off).
    A worker built on such a client gets the plugin's interceptors too."""
    if _provider is None:
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    return [OpenTelemetryPlugin(add_temporal_spans=True)]


def instrument_app(app: Any) -> None:
    """The gateway's requests as spans, continuing a caller's ``traceparent``: each
    named by its route, with no URL but the route's (``route_only``) and no credential
    in a header the operator asks to capture (``OTEL_INSTRUMENTATION_HTTP_CAPTURE_*``)."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.util.http import (
        OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS as SANITIZE_FIELDS,
    )
    from opentelemetry.util.http import get_custom_headers

    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=_provider,
        excluded_urls="healthz,readyz,metrics,static",
        # No span per ASGI message: an event stream would make one per event.
        exclude_spans=["receive", "send"],
        server_request_hook=route_only,
        # Given, the list replaces the variable's: keep the operator's fields too.
        http_capture_headers_sanitize_fields=[
            *SECRET_HEADERS,
            *get_custom_headers(SANITIZE_FIELDS),
        ],
    )


#: Headers (regular expressions, any case) whose values a captured header never shows.
SECRET_HEADERS = ("authorization", "cookie", "key", "token", "secret", "password", "referer")
#: The attributes of a request's span that would hold its URL, or part of it.
URL_ATTRIBUTES = ("http.target", "url.path", "http.url", "url.full", "url.query")
#: What stands for the path of a request that matched no route.
UNMATCHED = "{unmatched}"


def route_only(span: Any, scope: Mapping[str, Any]) -> None:
    """The instrumentation's ``server_request_hook``: the request span's URL attributes
    say the route template (``/links/{token}``), never the path, the query string or
    credentials the request came with; a path that matched no route is ``{unmatched}``."""
    if not span.is_recording():
        return
    attributes = getattr(span, "attributes", None) or {}
    route = attributes.get("http.route") or UNMATCHED
    for name in URL_ATTRIBUTES:
        if name not in attributes:
            continue
        if name == "url.query":
            span.set_attribute(name, REDACTED)
        elif name in ("http.url", "url.full"):
            span.set_attribute(name, _origin(scope) + route)
        else:
            span.set_attribute(name, route)


def _origin(scope: Mapping[str, Any]) -> str:
    """``scheme://host[:port]`` of the server the request came to."""
    server = scope.get("server") or ("", None)
    host, port = server[0], server[1]
    return f"{scope.get('scheme', 'http')}://{host}{f':{port}' if port else ''}"


@contextmanager
def command_span(command: str) -> Iterator[Span]:
    """One CLI command (``parley send``): the root of its client calls' spans."""
    with trace.get_tracer(TRACER_NAME).start_as_current_span(command, kind=SpanKind.CLIENT) as span:
        yield span


@contextmanager
def model_span(model: str, session_id: str) -> Iterator[Span]:
    """One model call (``chat <model>``); ``record_usage`` adds its token counts."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "parley.session_id": session_id,
    }
    with _span(f"chat {model}", attributes) as span:
        yield span


def record_usage(span: Span, usage: Mapping[str, Any] | None) -> None:
    """A reply's ``usage_metadata`` as GenAI attributes (nothing when it has none)."""
    if not usage:
        return
    for key, attribute in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
        ("total_tokens", "parley.usage.total_tokens"),
    ):
        if isinstance(usage.get(key), int):
            span.set_attribute(attribute, usage[key])


@contextmanager
def tool_span(name: str, tool_call_id: str, session_id: str) -> Iterator[Span]:
    """One tool run (``execute_tool <name>``); ``record_status`` adds how it ended."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": tool_call_id,
        "parley.session_id": session_id,
    }
    with _span(f"execute_tool {name}", attributes) as span:
        yield span


def record_status(span: Span, status: str, error_type: str | None = None) -> None:
    """The envelope's status (``success``, ``error``, ``cut``) on the tool's span."""
    span.set_attribute("parley.tool.status", status)
    if error_type:
        span.set_attribute("error.type", error_type)
    if status != "success":
        span.set_status(Status(StatusCode.ERROR, error_type or status))


@contextmanager
def _span(name: str, attributes: dict[str, Any]) -> Iterator[Span]:
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attributes) as span:
        yield span


class RedactingExporter:
    """A span exporter in front of another: each span goes on with ``redact`` applied to
    its name, its attributes, its events' names and attributes and its status, so no
    secret of the process, and nothing shaped like one, leaves it."""

    def __init__(self, exporter: Any) -> None:
        self._exporter = exporter

    def export(self, spans: Any) -> Any:
        return self._exporter.export([_redacted(span) for span in spans])

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._exporter.force_flush(timeout_millis))


def _redacted(span: Any) -> Any:
    from opentelemetry.sdk.trace import Event, ReadableSpan

    events = [
        Event(redact(e.name), _redact_attributes(e.attributes), e.timestamp) for e in span.events
    ]
    status = span.status
    if status.description:
        status = Status(status.status_code, redact(status.description))
    return ReadableSpan(
        name=redact(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_redact_attributes(span.attributes),
        events=events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _redact_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        if isinstance(value, str):
            value = redact(value)
        elif isinstance(value, tuple | list) and all(isinstance(v, str) for v in value):
            value = tuple(redact(v) for v in value)
        cleaned[key] = value
    return cleaned
