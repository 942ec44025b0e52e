"""Token usage of model calls: what the provider reported for each, summed per turn and
per conversation. Pure (both sides of the Temporal boundary read it).

A call's usage comes from its reply's ``usage_metadata`` (langchain-core fills it from
the provider's ``usage``; for a streamed reply, from the final chunk, which
``stream_usage=True`` asks for). A model that reports none (the ``script:`` model) counts
as a call with no tokens. A model that only estimates its usage (the offline
``scripted`` model) says so with ``ESTIMATED_USAGE`` in its reply's
``response_metadata``: such calls are counted in ``estimated_calls``, and every surface
that shows usage calls it an estimate. Prompt caching shows in ``cache_read_tokens`` and
``cache_write_tokens`` (``usage_metadata``'s ``input_token_details`` ``cache_read`` and
``cache_creation``; part of ``input_tokens``, not added to it): what a provider read
from, and wrote to, its prompt cache. None when no call reported either, so histories
written before these fields read back unchanged.

With several models (``PARLEY_MODEL`` lists them; ``parley.contracts.failover``) each
call's usage is also counted under its model's spec in ``by_model`` (None on a worker
with one model, and in histories written before it, which so read back unchanged).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pydantic import Field

from parley.contracts.payloads import Contract

#: The key of a reply's ``response_metadata`` that marks its usage as an estimate.
ESTIMATED_USAGE = "parley_usage_estimated"


class Usage(Contract):
    """Tokens over ``model_calls`` model calls; usages add up field by field."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    model_calls: int = Field(default=0, ge=0)
    #: How many of those calls' usage was estimated, not reported (None: none).
    estimated_calls: int | None = Field(default=None, ge=0)
    #: Input tokens read from the provider's prompt cache (billed at a fraction).
    cache_read_tokens: int | None = Field(default=None, ge=0)
    #: Input tokens written to the provider's prompt cache.
    cache_write_tokens: int | None = Field(default=None, ge=0)
    #: The same, per model (``PARLEY_MODEL``'s spec), where the worker lists several.
    by_model: dict[str, Usage] | None = None

    def under(self, model: str | None) -> Usage:
        """This usage counted under ``model`` too (as is for None: one model)."""
        if model is None:
            return self
        alone = self.model_copy(update={"by_model": None})
        return self.model_copy(update={"by_model": {model: alone}})

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        estimated = (self.estimated_calls or 0) + (other.estimated_calls or 0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            model_calls=self.model_calls + other.model_calls,
            estimated_calls=estimated or None,
            cache_read_tokens=_sum(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=_sum(self.cache_write_tokens, other.cache_write_tokens),
            by_model=_by_model(self.by_model, other.by_model),
        )

    @classmethod
    def of_call(cls, reply: Any) -> Usage:
        """One model call's usage, read from its reply's ``usage_metadata``."""
        reported = getattr(reply, "usage_metadata", None) or {}
        input_tokens = _count(reported.get("input_tokens"))
        output_tokens = _count(reported.get("output_tokens"))
        total = reported.get("total_tokens")
        metadata = getattr(reply, "response_metadata", None)
        estimated = isinstance(metadata, dict) and bool(metadata.get(ESTIMATED_USAGE))
        details = reported.get("input_token_details")
        details = details if isinstance(details, dict) else {}
        return cls(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=_count(total) if total is not None else input_tokens + output_tokens,
            model_calls=1,
            estimated_calls=1 if estimated and reported else None,
            cache_read_tokens=_count(details["cache_read"]) if "cache_read" in details else None,
            cache_write_tokens=_cache_writes(details),
        )

    @classmethod
    def of_failure(cls, failure: Any) -> Usage | None:
        """What a failed model call's provider reported before it failed (the usage
        ``call_model`` puts in the failure's details, with its ``model`` where the
        worker lists several), or None: billed tokens count."""
        for detail in getattr(failure, "details", None) or ():
            if isinstance(detail, dict) and isinstance(detail.get("usage_metadata"), dict):
                usage = cls.of_call(SimpleNamespace(usage_metadata=detail["usage_metadata"]))
                model = detail.get("model")
                return usage.under(model if isinstance(model, str) else None)
        return None


def _by_model(a: dict[str, Usage] | None, b: dict[str, Usage] | None) -> dict[str, Usage] | None:
    if not a or not b:
        return dict(a or b or {}) or None
    both = {**a, **b}
    return {name: a[name] + b[name] if name in a and name in b else both[name] for name in both}


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def _cache_writes(details: dict[str, Any]) -> int | None:
    """Tokens written to the cache: ``cache_creation``, or its parts by lifetime
    (langchain-anthropic reports ``ephemeral_5m/1h_input_tokens`` and sets it to 0)."""
    parts = [details.get(key) for key in _CACHE_WRITES if details.get(key) is not None]
    return sum(_count(part) for part in parts) if parts else None


_CACHE_WRITES = ("cache_creation", "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")


def _count(value: Any) -> int:
    """A reported token count; a provider's nonsense (negative, not a number) is 0."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0
