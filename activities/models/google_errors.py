"""What Google's Gemini API errors say, in the shape
``parley.activities.models.failures`` reads from every provider. Activity side; no SDK
imported (errors are recognised by their classes' module and name).

``langchain-google-genai`` re-raises the ``google-genai`` SDK's ``ClientError`` (4xx)
as its own classes (``GoogleRateLimitError``, ...) without status or body, *from* the
SDK's error; its ``ServerError`` (5xx) subclass keeps them; an ``{"error": ...}`` line
inside a 200 stream is raised with the code its body names. :func:`google_failure`
finds the SDK's ``APIError`` and gives back a :class:`GoogleFailure`: ``status_code``,
the error ``body`` (``{"error": {"code", "message", "status", "details"}}``) and the
response's headers, where:

- Google's ``RetryInfo`` detail (``"retryDelay": "33s"``), its word on when to come
  back after a ``429 RESOURCE_EXHAUSTED`` or ``503 UNAVAILABLE``, is a ``retry-after``
  header (a real one wins);
- a code missing from the body is the one its status name stands for
  (``UNAVAILABLE`` 503, ...);
- a key Google refused (``400 INVALID_ARGUMENT`` with the ``API_KEY_INVALID`` or
  ``API_KEY_EXPIRED`` reason) is the 401 it means, so the error names
  ``GOOGLE_API_KEY`` (``provider_errors.variables_prefix``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Google's canonical status names (``google.rpc.Code``) as HTTP statuses.
STATUS_CODES = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INTERNAL": 500,
    "DATA_LOSS": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_REFUSED_KEY_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED"})
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_GOOGLE_MODULES = ("google.genai", "langchain_google_genai")


class GoogleFailure(Exception):
    """The SDK's ``APIError`` as ``failures`` reads errors: status, body, headers."""

    #: Whose variables a refused key or a missing model names.
    provider_variables = "GOOGLE"

    def __init__(self, status_code: int | None, body: Any, headers: dict[str, str]) -> None:
        error = body.get("error") if isinstance(body, Mapping) else None
        message = error.get("message") if isinstance(error, Mapping) else None
        super().__init__(message if isinstance(message, str) else str(body))
        self.status_code = status_code
        self.body = body
        self.response = _Response(status_code, headers)


class _Response:
    def __init__(self, status_code: int | None, headers: dict[str, str]) -> None:
        self.status_code = status_code
        self.headers = headers


def google_failure(exc: BaseException) -> GoogleFailure | None:
    """The Gemini API's error behind ``exc``, or None when ``exc`` is not Google's."""
    api_error = _api_error(exc)
    if api_error is None:
        return None
    body = getattr(api_error, "details", None)
    if not isinstance(body, Mapping) or not isinstance(body.get("error"), Mapping):
        body = {"error": {"code": getattr(api_error, "code", None), "message": str(api_error)}}
    error = dict(body["error"])
    code = getattr(api_error, "code", None)
    if not isinstance(code, int) or isinstance(code, bool):
        code = error.get("code") if isinstance(error.get("code"), int) else None
    code = code or STATUS_CODES.get(str(error.get("status") or "").upper())
    if code == 400 and _reasons(error) & _REFUSED_KEY_REASONS:
        code = 401
    headers = _headers(getattr(getattr(api_error, "response", None), "headers", None))
    delay = retry_delay(error)
    if delay is not None and "retry-after" not in headers and "retry-after-ms" not in headers:
        headers["retry-after"] = f"{delay:g}"
    return GoogleFailure(code, {**body, "error": error}, headers)


def retry_delay(error: Mapping[str, Any]) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"retryDelay": "2.5s"``)."""
    for detail in _details(error):
        if detail.get("@type") == _RETRY_INFO:
            match = _DURATION.match(str(detail.get("retryDelay") or ""))
            if match:
                return float(match.group(1))
    return None


def _api_error(exc: BaseException) -> BaseException | None:
    """``exc`` if it is the SDK's ``APIError``, or the one a langchain-google-genai
    error was raised from."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 3:
        if _is_google(current, "APIError"):
            return current
        if not _is_google(current):
            return None
        current, seen = current.__cause__, seen + 1
    return None


def _is_google(exc: BaseException, name: str | None = None) -> bool:
    return any(
        cls.__module__.startswith(_GOOGLE_MODULES) and (name is None or cls.__name__ == name)
        for cls in type(exc).__mro__
    )


def _details(error: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    details = error.get("details")
    return [d for d in details if isinstance(d, Mapping)] if isinstance(details, list) else []


def _reasons(error: Mapping[str, Any]) -> set[str]:
    return {str(d.get("reason")) for d in _details(error) if d.get("reason")}


def _headers(headers: Any) -> dict[str, str]:
    try:
        return {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    except Exception:  # an unexpected shape: no headers rather than no classification
        return {}
