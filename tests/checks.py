"""Moved to ``tests.support.transcripts``; kept while tests owned by others still import
``tests.checks`` (remove it when none does)."""

from tests.support.transcripts import (
    ai_messages,
    envelope_status,
    new_session,
    runs_in,
    tool_messages,
)

__all__ = ["ai_messages", "envelope_status", "new_session", "runs_in", "tool_messages"]
