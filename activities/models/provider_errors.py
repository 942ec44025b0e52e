"""What a provider's own error vocabulary means, for ``parley.activities.models.failures``.
Activity side; plain data and names, no SDK imported.

- :data:`ERROR_TYPE_STATUSES`: Anthropic's error types (the ``type`` of its error bodies,
  and of the ``error`` event it may send inside a 200 stream) as the HTTP statuses they
  stand for, so that an error mid-stream is classified as the same error would be before
  the stream began (``overloaded_error`` and ``rate_limit_error`` retried,
  ``invalid_request_error`` not).
- :func:`variables_prefix`: whose variables a refused key or a missing model names
  (``ANTHROPIC_API_KEY`` for the ``anthropic`` SDK's errors, ``GOOGLE_API_KEY`` for
  Google's, as ``google_errors`` reads them, ``OPENAI_API_KEY`` else).
"""

from __future__ import annotations

ERROR_TYPE_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_ANTHROPIC_MODULES = frozenset({"anthropic", "langchain_anthropic"})


def variables_prefix(exc: BaseException) -> str:
    """``ANTHROPIC`` when the ``anthropic`` SDK (or langchain-anthropic) raised ``exc``,
    the error's own ``provider_variables`` (``GOOGLE``), else ``OPENAI``: the prefix of
    the variables to check."""
    if isinstance(named := getattr(exc, "provider_variables", None), str):
        return named
    roots = {cls.__module__.split(".", 1)[0] for cls in type(exc).__mro__}
    return "ANTHROPIC" if roots & _ANTHROPIC_MODULES else "OPENAI"
