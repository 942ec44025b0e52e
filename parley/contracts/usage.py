"""Token usage of model calls: what the provider reported for each, summed per turn and
per conversation. Pure (both sides of the Temporal boundary read it).

A call's usage comes from its reply's ``usage_metadata`` (langchain-core fills it from
the provider's ``usage``; for a streamed reply, from the final chunk, which
``stream_usage=True`` asks for). A model that reports none (the scripted models) counts
as a call with no tokens.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pydantic import Field

from parley.contracts.payloads import Contract


class Usage(Contract):
    """Tokens over ``model_calls`` model calls; usages add up field by field."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    model_calls: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            model_calls=self.model_calls + other.model_calls,
        )

    @classmethod
    def of_call(cls, reply: Any) -> Usage:
        """One model call's usage, read from its reply's ``usage_metadata``."""
        reported = getattr(reply, "usage_metadata", None) or {}
        input_tokens = _count(reported.get("input_tokens"))
        output_tokens = _count(reported.get("output_tokens"))
        total = reported.get("total_tokens")
        return cls(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=_count(total) if total is not None else input_tokens + output_tokens,
            model_calls=1,
        )

    @classmethod
    def of_failure(cls, failure: Any) -> Usage | None:
        """What a failed model call's provider reported before it failed (the usage
        ``call_model`` puts in the failure's details), or None: billed tokens count."""
        for detail in getattr(failure, "details", None) or ():
            if isinstance(detail, dict) and isinstance(detail.get("usage_metadata"), dict):
                return cls.of_call(SimpleNamespace(usage_metadata=detail["usage_metadata"]))
        return None


def _count(value: Any) -> int:
    """A reported token count; a provider's nonsense (negative, not a number) is 0."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0
