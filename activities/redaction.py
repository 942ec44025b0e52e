"""Keeping the worker's secrets out of workflow history. Activity side.

Whatever an activity raises is stored in history (message, details, cause), and error
bodies from a backend or a model provider can echo the credentials they refused. Every
failure an activity reports passes through ``redact`` first: it removes the value of
every secret in the worker's environment (variables named ``*KEY``, ``*TOKEN``,
``*SECRET``, ``*PASSWORD``) and anything shaped like an API key or bearer token.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"
_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
_KEY_SHAPES = re.compile(
    r"(?:\bsk-[A-Za-z0-9_\-*.]{6,}|\bBearer\s+\S+|\bapi[_-]?key=[^&\s]+)", re.IGNORECASE
)


def _worker_secrets() -> list[str]:
    values = {
        value.strip()
        for name, value in os.environ.items()
        if _SECRET_NAMES.search(name) and len(value.strip()) >= 6
    }
    return sorted(values, key=len, reverse=True)  # longest first: no partial leftovers


def redact(value: Any) -> Any:
    """``value`` (text, or JSON-like data) with secrets replaced by ``[redacted]``."""
    return _redact(value, _worker_secrets())


def _redact(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return _KEY_SHAPES.sub(REDACTED, value)
    if isinstance(value, Mapping):
        return {str(k): _redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, secrets) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _redact(str(value), secrets)
