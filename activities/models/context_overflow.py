"""Whether a failed model call was a context overflow, and the window it names.
Activity side: ``parley.activities.models.failures`` asks, and ``call_model`` gives the
result its own failure type, which the workflow can answer by compacting.

Providers say it in many ways: OpenAI's ``400 context_length_exceeded`` ("This model's
maximum context length is 8192 tokens"), Anthropic's "prompt is too long: 210000 tokens >
200000 maximum" and "input length and `max_tokens` exceed context limit: 197000 + 8192 >
200000", Gemini's "The input token count (1048577) exceeds the maximum number of tokens
allowed (1048576).", langchain-core's ``ContextOverflowError``, others "a context window
of 32768 tokens".
"""

from __future__ import annotations

import re

from parley.contracts.errors import (
    ContextLengthExceeded,
    ErrorType,
    ModelReplyTooLarge,
    ParleyError,
)

_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "context_window",
    "input tokens exceed",
    "prompt is too long",
    "exceed context limit",
    "exceeds the maximum number of tokens",
    "input token count",
)
_CODES = ("context_length_exceeded", "string_above_max_length")
_WINDOW_FIGURES = (
    re.compile(r"maximum context length is (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"> ?(\d[\d,]*) maximum", re.IGNORECASE),
    re.compile(r"context (?:window|length) (?:of|is) (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"exceed context limit: [\d, +]*> ?(\d[\d,]*)", re.IGNORECASE),
    re.compile(r"maximum number of tokens allowed \((\d[\d,]*)\)", re.IGNORECASE),
)


def is_context_overflow(exc: BaseException, code: str | None, message: str | None) -> bool:
    if any(cls.__name__ == "ContextOverflowError" for cls in type(exc).__mro__):
        return True
    if code and code.lower() in _CODES:
        return True
    lowered = (message or "").lower()
    return any(marker in lowered for marker in _MARKERS)


def window_named(message: str | None) -> int | None:
    """The context window (tokens) the provider's message names, if it names one."""
    for pattern in _WINDOW_FIGURES:
        match = pattern.search(message or "")
        if match:
            return int(match.group(1).replace(",", ""))
    return None


def model_error_type(error: ParleyError) -> str:
    """The ``ApplicationError`` type of a classified model failure that is no transient
    one: its own for a context overflow and a reply too large, ``ModelRequestError``
    otherwise."""
    if isinstance(error, ContextLengthExceeded):
        return ErrorType.CONTEXT_LENGTH_EXCEEDED
    if isinstance(error, ModelReplyTooLarge):
        return ErrorType.MODEL_REPLY_TOO_LARGE
    return ErrorType.MODEL_REQUEST
