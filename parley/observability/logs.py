"""Logging for Parley's processes (worker, gateway): plain text, or one JSON object per
line with ``PARLEY_LOG_FORMAT=json``. Client/worker side, never imported by workflows.

A JSON line carries the conversation it is about when the log call knows it: the SDK's
workflow and activity loggers add their context (``temporal_workflow`` /
``temporal_activity``), from which come ``workflow_id``, ``session_id`` and the
activity's ``attempt``; a tool run adds ``tool`` and ``tool_call_id``. Every message and
traceback passes through ``redact``: no secret of the worker's environment, no bearer
token or API key reaches a log line. Text lines too: every handler Parley installs (and
Python's last-resort one, which ``parley dev`` prints with) carries ``RedactSecrets``,
which redacts a record's message and traceback before any formatter reads them, the
HTTP server's (uvicorn's, which logs through these handlers) included. The HTTP
clients' own line per request (``httpx``: its whole URL, a webhook's token in its path
or a key in its query string) is left out below WARNING.

A tool error the model reads (``ToolInputError``, ``ToolPermissionError``: a wrong
argument, a protected branch) is expected: the tool's activity logs it in one line,
and the SDK's own "Completing activity as failed" record of it, a traceback of some 40
lines, is lowered to DEBUG without the traceback (``ExpectedToolErrors``), as the SDK
does for errors marked benign. Every other failure keeps its traceback.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from temporalio.exceptions import ApplicationError

from parley.contracts import WORKFLOW_ID_PREFIX
from parley.contracts.errors import ErrorType
from parley.observability.redaction import redact

#: Attributes a log call may pass in ``extra`` that go into the JSON line as they are.
PASSED_FIELDS = ("session_id", "tool", "tool_call_id")


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        context = getattr(record, "temporal_activity", None) or getattr(
            record, "temporal_workflow", None
        )
        if isinstance(context, dict):
            workflow_id = context.get("workflow_id")
            if isinstance(workflow_id, str):
                entry["workflow_id"] = workflow_id
                if workflow_id.startswith(WORKFLOW_ID_PREFIX):
                    entry["session_id"] = workflow_id.removeprefix(WORKFLOW_ID_PREFIX)
            for key in ("run_id", "workflow_run_id", "activity_type", "attempt"):
                if key in context:
                    entry[key] = context[key]
        for key in PASSED_FIELDS:
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


class RedactSecrets(logging.Filter):
    """On a handler: the record's message, arguments and traceback pass through
    ``redact`` before any formatter reads them (so text lines are redacted as JSON
    lines are). A record whose message cannot be made is left to the handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # the handler reports a record it cannot format
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


#: HTTP clients that log every request's URL at INFO.
QUIET_HTTP_CLIENTS = ("httpx", "httpx2", "httpcore")


def redact_log_records(handler: logging.Handler | None = None) -> None:
    """Put ``RedactSecrets`` on ``handler`` and on Python's last-resort handler (what
    prints a warning when no handler is installed), once each."""
    for each in (handler, logging.lastResort):
        if each is not None and not any(isinstance(f, RedactSecrets) for f in each.filters):
            each.addFilter(RedactSecrets())


#: The logger the SDK reports failed activities on.
SDK_ACTIVITY_LOGGER = "temporalio.activity"
#: Failures that are answers for the model, not faults of the worker or the tool.
EXPECTED_TOOL_ERRORS = frozenset({ErrorType.TOOL_INPUT, ErrorType.TOOL_PERMISSION})


class ExpectedToolErrors(logging.Filter):
    """On the SDK's activity logger: its record of an activity that failed with an
    expected tool error becomes a DEBUG line naming the error, without the traceback
    (dropped unless DEBUG is on); any other record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not (isinstance(error, ApplicationError) and error.type in EXPECTED_TOOL_ERRORS):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.msg = f"{record.getMessage()}: {error.type}: {error.message}"
        record.args = None
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        record.exc_info, record.exc_text = None, None
        return True


def quiet_expected_tool_errors() -> None:
    """Install ``ExpectedToolErrors`` on the SDK's activity logger (once): it applies
    whichever handler prints the record, Python's last-resort one included."""
    logger = logging.getLogger(SDK_ACTIVITY_LOGGER)
    if not any(isinstance(f, ExpectedToolErrors) for f in logger.filters):
        logger.addFilter(ExpectedToolErrors())


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """Send the process's logs to stderr, as text or JSON lines, expected tool errors
    in one line."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    redact_log_records(handler)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for client in QUIET_HTTP_CLIENTS:
        logging.getLogger(client).setLevel(max(level, logging.WARNING))
    quiet_expected_tool_errors()
