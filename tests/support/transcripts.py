"""Assertions shared by the conversation tests: what a valid transcript looks like,
and a new session id. Client side."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from tests.support.recording_tools import RUNS


def new_session() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def runs_in(session_id: str, tool: str) -> list[dict[str, Any]]:
    """The recorded runs of ``tool`` in one conversation (RUNS is shared by all tests)."""
    prefix = f"conversation-{session_id}:"
    return [r for r in RUNS if r["tool"] == tool and str(r.get("key", "")).startswith(prefix)]


def tool_messages(
    transcript: list[BaseMessage], pending: tuple[str, ...] = ()
) -> dict[str, ToolMessage]:
    """Every ToolMessage by tool_call_id, after checking that each proposed call but the
    ``pending`` ones is answered exactly once."""
    answers = [m for m in transcript if isinstance(m, ToolMessage)]
    counts = Counter(m.tool_call_id for m in answers)
    twice = [call_id for call_id, n in counts.items() if n > 1]
    assert twice == [], f"answered more than once: {twice}"
    # An invalid call (arguments refused when proposed) is answered too: providers
    # receive it as a tool call of its message.
    proposed = [
        c["id"]
        for m in transcript
        if isinstance(m, AIMessage)
        for c in [*m.tool_calls, *m.invalid_tool_calls]
    ]
    assert not set(pending) & set(counts), "a pending call is already answered"
    assert sorted([*counts, *pending]) == sorted(proposed), "every call answered exactly once"
    return {m.tool_call_id: m for m in answers}


def envelope_status(message: ToolMessage) -> str:
    assert isinstance(message.artifact, dict)
    return message.artifact["status"]


def ai_messages(transcript: list[BaseMessage]) -> list[AIMessage]:
    return [m for m in transcript if isinstance(m, AIMessage)]
