"""Moved to ``tests.support.gateway``; kept while tests owned by others still import
``tests.gateway_support`` (remove it when none does)."""

from tests.support.gateway import (
    ALICE_TOKEN,
    BOB_TOKEN,
    TOKENS,
    auth,
    serve_gateway,
    sse_events,
)

__all__ = ["ALICE_TOKEN", "BOB_TOKEN", "TOKENS", "auth", "serve_gateway", "sse_events"]
