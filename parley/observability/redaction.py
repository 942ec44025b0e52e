"""Keeping the worker's secrets out of workflow history and out of log lines. Worker
side (activities and the log formatter); never imported by workflows. No I/O.

Whatever an activity raises is stored in history (message, details, cause), and error
bodies from a backend or a model provider can echo the credentials they refused. Every
failure an activity reports, and every JSON log line, passes through ``redact`` first:
it removes the value of every secret the process was started with and anything shaped
like an API key or bearer token.

The secrets are the values of the environment's variables named ``*KEY``, ``*TOKEN``,
``*SECRET``, ``*PASSWORD``, the secret fields of the process's configuration (a
dataclass field with ``repr=False``: ``remember_config``) and the gateway's bearer
tokens (``remember_values``). Only the entry points read the environment: the worker
(``parley.worker.wiring.build_worker``), the gateway and the CLI hand it to
``remember_secrets`` once, at start; ``redact`` reads only what they remembered. Besides
those values, anything shaped like a secret goes: an ``sk-`` key, a Google ``AIza`` key,
a ``Bearer`` token, an ``api_key=`` parameter, and a signed approval link's token
(``parley.contracts.links``: base64url JSON, a dot, a signature).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[redacted]"
_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
_KEY_SHAPES = re.compile(
    r"(?:\bsk-[A-Za-z0-9_\-*.]{6,}|\bBearer\s+\S+|\bapi[_-]?key=[^&\s]+"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}|\bAIza[A-Za-z0-9_-]{30,})",
    re.IGNORECASE,
)
#: A shorter value would redact ordinary words.
_SHORTEST_SECRET = 6

#: The process's secrets, longest first (no partial leftovers). One list per process,
#: as the process has one environment; it only grows.
_secrets: list[str] = []


def remember_secrets(environment: Mapping[str, str]) -> None:
    """Keep the secret values of ``environment`` (the process's, read by its entry
    point) out of everything ``redact`` passes from now on."""
    remember_values(value for name, value in environment.items() if _SECRET_NAMES.search(name))


def remember_values(values: Iterable[str]) -> None:
    """Keep each of ``values`` (secrets however they are named: the gateway's bearer
    tokens) out of everything ``redact`` passes from now on."""
    found = {value.strip() for value in values if len(value.strip()) >= _SHORTEST_SECRET}
    _secrets[:] = sorted(found | set(_secrets), key=len, reverse=True)


def remember_config(config: Any) -> None:
    """Keep the secret fields of a dataclass ``config`` (those kept out of its repr,
    ``field(repr=False)``: ``Settings``' keys, tokens and link secret) out of everything
    ``redact`` passes from now on."""
    remember_values(
        value
        for entry in dataclasses.fields(config)
        if not entry.repr and isinstance(value := getattr(config, entry.name), str)
    )


def redact(value: Any) -> Any:
    """``value`` (text, or JSON-like data) with secrets replaced by ``[redacted]``."""
    return _redact(value, list(_secrets))


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
