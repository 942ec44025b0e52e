"""Where a transcript may be cut: the pure rule fork and rewind share. Both sides of the
Temporal boundary, no I/O: the client (``parley.client.forks``) judges a cut over the
whole transcript chain before it writes anything, and the ``rewind`` validator
(``parley.workflows.lifecycle.rewind``) judges it again over what its run holds.

A cut keeps a conversation's first N messages. It is refused when it would leave the
model a tool call without its answer (or an answer without its call); the refusal names
the nearest cuts that leave none.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage


def unanswered(messages: list[AnyMessage], offset: int, at: int) -> list[str]:
    """The ids of the tool calls that the first ``at`` messages leave without an answer,
    as far as ``messages`` (message ``offset`` first) tell."""
    called: dict[str, int] = {}
    answered: dict[str, int] = {}
    for i, message in enumerate(messages, start=offset):
        if isinstance(message, AIMessage):
            for call in [*message.tool_calls, *message.invalid_tool_calls]:
                if call.get("id"):
                    called[str(call["id"])] = i
        elif isinstance(message, ToolMessage):
            answered[message.tool_call_id] = i
    late = [c for c, i in called.items() if i < at and answered.get(c, at) >= at]
    # An answer kept out whose call is older than these messages: the call is kept in.
    late += [c for c, j in answered.items() if j >= at and c not in called]
    return late


def cut_refusal(messages: list[AnyMessage], offset: int, at: int, total: int) -> str | None:
    """Why keeping the first ``at`` of ``total`` messages is refused (None: it is not).
    ``messages`` are the ones known, message ``offset`` first."""
    if total == 0:
        return "the conversation has no messages yet: nothing to cut"
    if at < 1 or at > total:
        return f"the conversation has {total} messages: keep 1 to {total} of them, not {at}"
    late = unanswered(messages, offset, at)
    if not late:
        return None
    lowest = max(offset, 1)
    below = next(
        (c for c in range(at - 1, lowest - 1, -1) if not unanswered(messages, offset, c)), None
    )
    above = next((c for c in range(at + 1, total + 1) if not unanswered(messages, offset, c)), None)
    nearest = [_described(messages, offset, c, total) for c in (below, above) if c is not None]
    return (
        f"cannot keep the first {at} messages: the model's tool call {', '.join(late)} "
        "would be left without its answer; the nearest cuts that leave none: "
        + (" or ".join(nearest) or "none in the messages kept")
    )


def _described(messages: list[AnyMessage], offset: int, cut: int, total: int) -> str:
    if cut == total:
        return f"{cut} (all of them)"
    following = messages[cut - offset] if 0 <= cut - offset < len(messages) else None
    last = messages[cut - 1 - offset] if 0 <= cut - 1 - offset < len(messages) else None
    if isinstance(following, HumanMessage):
        return f"{cut} (before a user message)"
    if isinstance(last, ToolMessage):
        return f"{cut} (after the answers to the model's calls)"
    if isinstance(last, HumanMessage):
        return f"{cut} (after a user message)"
    return f"{cut} (after the model's reply)"
