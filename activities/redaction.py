"""Keeping the worker's secrets out of workflow history. Activity side.

Every failure an activity reports passes through ``redact`` first. The redaction itself
is ``parley.observability.redaction``, shared with the log formatter; the secrets it removes are the
ones the worker's entry point remembered at start (this module reads no environment).
"""

from __future__ import annotations

from parley.observability.redaction import REDACTED, redact, remember_secrets

__all__ = ["REDACTED", "redact", "remember_secrets"]
