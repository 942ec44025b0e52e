"""What a failed model call means: the one mapping from provider errors to Parley's.

Activity side: ``call_model`` hands whatever the chat model raised to
:func:`classify_model_error` and raises the result.

=====================================================  ====================
the provider said                                      Parley error
=====================================================  ====================
an overload code in the error body (any HTTP status,   TransientError
including 200 and 400; ``PARLEY_MODEL_OVERLOAD_CODES``)
HTTP 408, 425, 429, 5xx (``parley.contracts.errors``)            TransientError
timeout, connection refused/reset, protocol error      TransientError
context window exceeded                                ContextLengthExceeded (a
                                                       ModelRequestError naming the window)
HTTP 429 ``insufficient_quota`` (billing, not a        ModelRequestError
rate limit: waiting cannot help)
HTTP 400, 401, 403, 404, 409, 413, 422, any other 4xx  ModelRequestError
an error body inside an HTTP 200 or an SSE ``error``   the status its code names, as
event: a code that is a status, or Anthropic's error   above (``rate_limit_error`` 429,
type                                                   ``api_error`` 500, ...); else
                                                       ModelRequestError
anything else                                          ``None``: a programming error
=====================================================  ====================

``TransientError.retry_after`` comes from the ``retry-after-ms`` / ``Retry-After``
response headers (seconds, or an HTTP date). Messages and bodies are scrubbed of the API
key (the configured ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` / ``GOOGLE_API_KEY`` and
anything shaped like ``sk-...``, Anthropic's ``sk-ant-...`` included, or like Google's
``AIza...``) because they end up in workflow history; a refused key or a missing model
names the variables of the provider that refused (``provider_errors``, which also reads
Anthropic's error types as statuses).

Works from the exceptions' shape as well as their class: the ``openai`` and ``anthropic``
SDKs (and langchain's subclasses of them), ``google-genai``'s (read by ``google_errors``:
its ``RetryInfo`` delay, its status names), ``httpx`` / ``httpx2`` / ``aiohttp``,
langchain-core's ``ModelError`` family, and any SDK error carrying ``status_code`` and
``response``.

Long (about 400 lines) because providers report failures in many shapes (status codes,
error bodies inside a 200, SDK classes, transport errors); each reader is a small
function next to the one table above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from parley.activities.http import parse_retry_after
from parley.activities.models.context_overflow import (
    is_context_overflow,
    model_error_type,
    window_named,
)
from parley.activities.models.google_errors import google_failure
from parley.activities.models.provider_errors import ERROR_TYPE_STATUSES, variables_prefix
from parley.activities.redaction import redact
from parley.contracts.errors import (
    OVERLOAD_CODES_DEFAULT,
    ContextLengthExceeded,
    ModelRequestError,
    ParleyError,
    TransientError,
    is_transient_status,
)

__all__ = ["classify_model_error", "model_error_type"]

_MAX_TEXT = 500


def classify_model_error(
    exc: BaseException, *, overload_codes: frozenset[str] = OVERLOAD_CODES_DEFAULT
) -> ParleyError | None:
    """The Parley error for a failed model call, or ``None`` if ``exc`` is not recognised.

    ``overload_codes``: the worker's ``Settings.model_overload_codes``
    (``PARLEY_MODEL_OVERLOAD_CODES``), which ``ModelActivities`` is given; the shipped
    defaults otherwise.
    """
    codes = frozenset(c.lower() for c in overload_codes)
    if isinstance(exc, ParleyError):
        return exc
    # langchain-google-genai hides the SDK's status and body: read Google's own error.
    exc = google_failure(exc) or exc

    status = _status_code(exc)
    response = getattr(exc, "response", None)
    body = _body(exc, response)
    # langchain-openai raises ValueError(<error body>) for an HTTP 200 carrying an error.
    error_body_in_200 = _error_body_in_200(exc) if body is None else None
    if error_body_in_200 is not None:
        body = error_body_in_200
    # Anthropic's SSE ``error`` event in a 200 stream: its SDK raises the event, status 200.
    event = getattr(exc, "body", None)
    in_200 = error_body_in_200 is not None or (
        isinstance(event, Mapping)
        and event.get("type") == "error"
        and getattr(exc, "status_code", None) == 200
    )
    provider_code, provider_message = _code_and_message(body, exc)
    safe_body = redact(body)
    retry_after = _retry_after(getattr(response, "headers", None))

    overload = _overload_match(body, provider_message, codes)
    if overload is not None:
        return TransientError(
            _with_detail(f"the model provider is overloaded ({overload})", status, None),
            http_status=200 if in_200 else status,
            body=safe_body,
            retry_after=retry_after,
        )

    if status in (None, 400, 413, 422) and is_context_overflow(
        exc, provider_code, provider_message
    ):
        window = window_named(provider_message)
        where = f"its window of {window} tokens" if window else "its context window"
        return ContextLengthExceeded(
            _with_detail(
                f"context window exceeded: the conversation is too long for the model ({where})",
                status,
                provider_message,
            ),
            http_status=status,
            body=safe_body,
            window=window,
        )

    provider = variables_prefix(exc)
    if status is not None:
        return _by_status(status, provider_code, provider_message, safe_body, retry_after, provider)

    if _is_timeout(exc):
        return TransientError(
            "the model provider did not answer in time" + _where(exc), body=safe_body
        )
    if _is_connection_error(exc):
        return TransientError(
            "could not reach the model provider" + _where(exc) + _detail(_cause_text(exc)),
            body=safe_body,
        )

    # langchain-core's provider-neutral errors without an HTTP status.
    kind = _langchain_kind(exc)
    if kind is not None:
        if kind == "retryable":
            return TransientError(
                _with_detail("the model provider failed", None, provider_message),
                body=safe_body,
                retry_after=retry_after,
            )
        return ModelRequestError(
            _with_detail("the model provider rejected the request", None, provider_message),
            body=safe_body,
        )

    if in_200:
        code_status = _int_or_none(provider_code) or ERROR_TYPE_STATUSES.get(provider_code or "")
        if code_status is not None and 400 <= code_status <= 599:
            return _by_status(code_status, None, provider_message, safe_body, None, provider)
        return ModelRequestError(
            _with_detail(
                "the model provider returned an error", 200, provider_message or provider_code
            ),
            http_status=200,
            body=safe_body,
        )
    return None


# --- by HTTP status -------------------------------------------------------------------


def _by_status(
    status: int,
    code: str | None,
    message: str | None,
    body: Any,
    retry_after: float | None,
    provider: str = "OPENAI",
) -> ParleyError:
    if status == 429 and code == "insufficient_quota":
        return ModelRequestError(
            _with_detail(
                "the model provider account is out of quota (billing, not a rate limit)",
                status,
                message,
            ),
            http_status=status,
            body=body,
        )
    if status == 429:
        return TransientError(
            _with_detail("the model provider is rate limiting requests", status, message),
            http_status=status,
            body=body,
            retry_after=retry_after,
        )
    if is_transient_status(status) or status >= 500:
        return TransientError(
            _with_detail("the model provider failed", status, message),
            http_status=status,
            body=body,
            retry_after=retry_after,
        )
    if status == 401:
        text = f"the model provider refused the API key (check {provider}_API_KEY)"
    elif status == 403:
        text = "the model provider denied access to this model or endpoint"
    elif status == 404:
        text = f"model not found (check PARLEY_MODEL and {provider}_BASE_URL)"
    elif status == 413:
        text = "the request is too large for the model provider"
    elif 400 <= status < 500:
        text = "the model provider rejected the request"
    else:
        text = "the model provider returned an unexpected response"
    return ModelRequestError(_with_detail(text, status, message), http_status=status, body=body)


# --- reading the exception ------------------------------------------------------------


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        # openai.APIResponseValidationError carries the (successful) response's status.
        return status if status >= 400 else None
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        return status
    return None


def _body(exc: BaseException, response: Any) -> Any:
    """The error body: the SDK's decoded one (openai strips the ``error`` wrapper)."""
    body = getattr(exc, "body", None)
    if body is None and response is not None and _status_code(exc) is not None:
        try:
            body = response.json()
        except Exception:
            try:
                body = response.text
            except Exception:
                body = None
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        return body["error"]
    return body


def _code_and_message(body: Any, exc: BaseException | None) -> tuple[str | None, str | None]:
    code: str | None = None
    message: str | None = None
    if isinstance(body, Mapping):
        for key in ("code", "error_code", "type"):
            if body.get(key) not in (None, ""):
                code = str(body[key])
                break
        for key in ("message", "msg", "detail", "error_description", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                message = value
                break
    elif isinstance(body, str) and body.strip():
        message = body.strip()
    if code is None and exc is not None:
        sdk_code = getattr(exc, "code", None)
        if isinstance(sdk_code, str | int) and not isinstance(sdk_code, bool):
            code = str(sdk_code)
    if message is None and exc is not None:
        sdk_message = getattr(exc, "message", None)
        if isinstance(sdk_message, str) and sdk_message:
            message = sdk_message
    return code, message


def _overload_match(body: Any, message: str | None, codes: frozenset[str]) -> str | None:
    """The overload evidence found in the error body, described for the message."""
    if not codes:
        return None
    fields: dict[str, str] = {}
    if isinstance(body, Mapping):
        for key in ("code", "error_code", "type", "status"):
            if body.get(key) not in (None, ""):
                fields[key] = str(body[key])
    for key, value in fields.items():
        if value.strip().lower() in codes:
            text = f"{key} {value}"
            return f"{text}: {_clip(redact(message))}" if message else text
    texts = [message] if message else []
    if isinstance(body, str):
        texts.append(body)
    for text in texts:
        lowered = text.lower()
        for code in codes:
            if re.search(rf"(?<![a-z0-9_]){re.escape(code)}(?![a-z0-9_])", lowered):
                return _clip(redact(text))
    return None


def _retry_after(headers: Any) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    if headers is None:
        return None
    try:
        raw_ms = headers.get("retry-after-ms")
        raw = headers.get("retry-after")
    except Exception:
        return None
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000
        except (TypeError, ValueError):
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    return parse_retry_after(None if raw is None else str(raw))


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):
        return True
    return _is_instance_by_name(exc, _TIMEOUT_CLASSES)


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError):
        return True
    return _is_instance_by_name(exc, _CONNECTION_CLASSES)


# (module prefix, class name) pairs, checked along the MRO: no hard dependency on any SDK.
_TIMEOUT_CLASSES = frozenset(
    {
        ("openai", "APITimeoutError"),
        ("httpx", "TimeoutException"),
        ("httpx2", "TimeoutException"),
        ("langchain_core", "ModelTimeoutError"),
    }
)
_CONNECTION_CLASSES = frozenset(
    {
        ("openai", "APIConnectionError"),
        ("httpx", "TransportError"),
        ("httpx2", "TransportError"),
        ("aiohttp", "ClientConnectionError"),  # google-genai's async transport
        ("aiohttp", "ClientPayloadError"),
        ("langchain_core", "ModelConnectionError"),
    }
)


def _is_instance_by_name(exc: BaseException, classes: Iterable[tuple[str, str]]) -> bool:
    wanted = set(classes)
    for cls in type(exc).__mro__:
        root = cls.__module__.split(".", 1)[0]
        if (root, cls.__name__) in wanted:
            return True
    return False


def _langchain_kind(exc: BaseException) -> str | None:
    names = [
        cls.__name__ for cls in type(exc).__mro__ if cls.__module__.startswith("langchain_core")
    ]
    if "ModelError" not in names:
        return None
    if "ModelRefusalError" in names:
        return None  # a successful response the caller asked to parse; not a call failure
    return "retryable" if getattr(exc, "is_retryable", False) else "request"


def _error_body_in_200(exc: BaseException) -> Mapping[str, Any] | None:
    if type(exc) is not ValueError or len(exc.args) != 1:
        return None
    arg = exc.args[0]
    if isinstance(arg, Mapping) and any(k in arg for k in ("code", "message", "type", "msg")):
        return arg
    return None


def _cause_text(exc: BaseException) -> str:
    """The SDK's message, plus the low-level reason it wraps (e.g. connection refused)."""
    text = str(exc) or type(exc).__name__
    cause, seen = exc.__cause__ or exc.__context__, 0
    while cause is not None and seen < 5:
        if str(cause) and str(cause) not in text:
            text = f"{text} ({cause})"
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return text


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# --- wording and scrubbing ------------------------------------------------------------


def _where(exc: BaseException) -> str:
    request = getattr(exc, "request", None)
    try:
        url = request.url if request is not None else None
    except Exception:  # httpx raises if the request was never set
        url = None
    if url is None:
        return ""
    try:
        return f" at {url.scheme}://{url.host}{f':{url.port}' if url.port else ''}"
    except Exception:
        return ""


def _with_detail(text: str, status: int | None, message: str | None) -> str:
    if status is not None:
        text = f"{text} (HTTP {status})"
    return text + _detail(message)


def _detail(message: str | None) -> str:
    if not message:
        return ""
    return f": {_clip(redact(message))}"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"
