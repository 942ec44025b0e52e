"""What one model call may return: its size and the tool calls it proposes. Activity side.

Everything a model returns enters the conversation's workflow run: the reply is the
``call_model`` activity's result (in history, or in the payload store by reference when
large), its text is streamed by signal (``streaming``), and each proposed call becomes
an activity or a pending call. So a reply is bounded, in UTF-8 bytes as it is stored
(text, tool calls and their arguments, the provider's metadata; ``ReplyLimits.max_bytes``,
``PARLEY_MAX_MODEL_REPLY_BYTES``), and so is the number of calls it proposes
(``MODEL_TOOL_CALLS_PER_REPLY``). A reply past either bound is a model error of its own
(``ModelReplyTooLarge``: non-retryable, one line naming the size and the bound): the
turn fails and the conversation goes on. :class:`ReplyMeter` measures a reply while it
streams, so reading stops as soon as it passes the bound: a provider that streams
without end costs one bounded read, not the worker's memory or the run's history.
:func:`merged` makes the stream's pieces one message in linear time: LangChain's
pairwise ``+`` re-parses a tool call's arguments at every piece, and 8,000 pieces of one
argument took a minute.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pydantic_core
from langchain_core.messages import AIMessageChunk, BaseMessage

from parley.contracts.errors import ModelReplyTooLarge
from parley.contracts.limits import (
    MODEL_REPLY_MAX_BYTES_DEFAULT,
    MODEL_TOOL_CALLS_PER_REPLY,
    utf8_size,
)

SETTING = "PARLEY_MAX_MODEL_REPLY_BYTES"


@dataclass(frozen=True)
class ReplyLimits:
    max_bytes: int = MODEL_REPLY_MAX_BYTES_DEFAULT
    max_tool_calls: int = MODEL_TOOL_CALLS_PER_REPLY


class ReplyMeter:
    """Counts a reply's bytes as its pieces arrive; raises once they pass the bound."""

    def __init__(self, limits: ReplyLimits) -> None:
        self._limits = limits
        self.size = 0

    def add(self, piece: BaseMessage) -> None:
        """A piece of the stream (a reply that comes whole is left to
        :func:`check_reply`)."""
        if not isinstance(piece, AIMessageChunk):
            return
        self.size += piece_size(piece)
        if self.size > self._limits.max_bytes:
            raise ModelReplyTooLarge(
                f"the model's reply passed {self._limits.max_bytes:,} bytes, the most one "
                f"model call may return ({SETTING}); it was cut off at {self.size:,} bytes. "
                "Ask for a shorter answer, or raise the limit"
            )


def check_reply(reply: BaseMessage, limits: ReplyLimits) -> None:
    """The whole reply, as it will be stored, within both bounds."""
    size = stored_size(reply)
    if size > limits.max_bytes:
        raise ModelReplyTooLarge(
            f"the model's reply is {size:,} bytes, over the {limits.max_bytes:,} bytes one "
            f"model call may return ({SETTING}). Ask for a shorter answer, or raise the limit"
        )
    calls = len(getattr(reply, "tool_calls", [])) + len(getattr(reply, "invalid_tool_calls", []))
    if calls > limits.max_tool_calls:
        raise ModelReplyTooLarge(
            f"the model proposed {calls:,} tool calls in one reply; one reply may propose at "
            f"most {limits.max_tool_calls}. Ask for fewer calls at a time"
        )


def merged(pieces: list[Any]) -> BaseMessage:
    """The stream's pieces as one message, as LangChain's ``+`` would make it. Runs of
    pieces that only continue the text, or only continue one tool call's arguments,
    are joined first; the few pieces left are merged by LangChain at once."""
    if not all(isinstance(p, AIMessageChunk) for p in pieces):
        reply = pieces[0]
        for piece in pieces[1:]:
            reply = reply + piece
        return reply
    runs: list[list[AIMessageChunk]] = []
    for piece in pieces:
        if runs and _continues(runs[-1][0], piece):
            runs[-1].append(piece)
        else:
            runs.append([piece])
    joined = [_joined(run) for run in runs]
    return joined[0] if len(joined) == 1 else joined[0] + joined[1:]


def _continues(head: AIMessageChunk, piece: AIMessageChunk) -> bool:
    """Whether ``piece`` only adds text to ``head``'s, or only arguments to its one
    tool call (nothing else that a merge would combine differently)."""
    if (
        piece.id != head.id
        or piece.additional_kwargs
        or head.additional_kwargs
        or piece.usage_metadata
        or head.usage_metadata
        or piece.response_metadata != head.response_metadata
        or getattr(piece, "chunk_position", None)
        or getattr(head, "chunk_position", None)
        or not isinstance(piece.content, str)
        or not isinstance(head.content, str)
    ):
        return False
    if not head.tool_call_chunks and not piece.tool_call_chunks:
        return True
    if head.content or piece.content:
        return False
    if len(head.tool_call_chunks) != 1 or len(piece.tool_call_chunks) != 1:
        return False
    first, more = head.tool_call_chunks[0], piece.tool_call_chunks[0]
    return more.get("index") == first.get("index") and not more.get("name") and not more.get("id")


def _joined(run: list[AIMessageChunk]) -> AIMessageChunk:
    head = run[0]
    if len(run) == 1:
        return head
    update: dict[str, Any] = {"content": "".join(str(p.content) for p in run)}
    if head.tool_call_chunks:
        parts = [p.tool_call_chunks[0].get("args") for p in run]
        args = None if all(a is None for a in parts) else "".join(a or "" for a in parts)
        update["tool_call_chunks"] = [{**head.tool_call_chunks[0], "args": args}]
    return head.model_copy(update=update)


def piece_size(piece: AIMessageChunk) -> int:
    """About how many bytes a streamed piece adds to the reply: its text and its tool
    calls' pieces."""
    size = _content_size(piece.content)
    for call in piece.tool_call_chunks:
        size += sum(utf8_size(call.get(key) or "") for key in ("name", "args", "id"))
    if piece.additional_kwargs:
        size += len(_json(piece.additional_kwargs))
    return size


def stored_size(message: BaseMessage) -> int:
    """The message's size as a payload carries it (its JSON)."""
    return len(_json(message.model_dump(mode="json")))


def _content_size(content: Any) -> int:
    if isinstance(content, str):
        return utf8_size(content)
    return sum(map(_part_size, content)) if isinstance(content, list) else len(_json(content))


def _part_size(part: Any) -> int:
    """A content part's growth: a delta of a block (Anthropic's ``{"type": "text",
    "text", "index"}`` every few words, ``input_json_delta`` for a tool's arguments)
    adds its text to the block, not its JSON again."""
    field = _DELTA_TEXT.get(str(part.get("type"))) if isinstance(part, dict) else None
    value = part.get(field) if field else None
    return utf8_size(value) if isinstance(value, str) else len(_json(part))


_DELTA_TEXT = {"text": "text", "input_json_delta": "partial_json"}


def _json(value: Any) -> bytes:
    try:
        return pydantic_core.to_json(value)
    except Exception:  # something no payload could carry either: its text
        return json.dumps(value, default=str).encode("utf-8", "surrogatepass")
