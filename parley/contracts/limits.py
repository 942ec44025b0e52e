"""Bounds on what a conversation keeps and shows, and the pure helpers that apply
them inside the workflow (a model's view of a long result, a turn's preview)."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, AnyMessage

from parley.contracts.tools import ToolResult, TurnToolResult

#: Limits on what a conversation keeps in memory and in one payload. They bound the
#: workflow's state (so the continue-as-new input), every query page and update result.
MESSAGE_MAX_BYTES_DEFAULT = 1024 * 1024
#: A conversation's defaults, written once: ``ConversationStart`` (what a conversation
#: runs with) and ``parley.config.settings.Settings`` (what the worker starts it with) read
#: them from here.
PENDING_EXPIRY_SECONDS_DEFAULT = 24 * 3600
#: Ten years: far beyond any real wait, and well inside what ``timedelta`` and a
#: Temporal timer can represent.
PENDING_EXPIRY_SECONDS_MAX = 10 * 365 * 24 * 3600
MODEL_CALLS_PER_TURN_DEFAULT = 8
CONTINUE_AS_NEW_AFTER_EVENTS_DEFAULT = 10_000
#: A tool result longer than this reaches the model truncated, with a note saying so.
MODEL_RESULT_MAX_CHARS = 32_000
#: Content and payload previews in a ``TurnResult``, an event or an audit entry.
PREVIEW_CHARS = 4_000
PAYLOAD_PREVIEW_BYTES = 16 * 1024
#: Tool arguments shown in the Temporal UI's current details and in audit entries.
PREVIEW_ARGS_CHARS = 2_000
#: What the workflow keeps in memory: older messages are in the transcript chain,
#: older audit entries and events in the histories of earlier runs.
KEPT_TRANSCRIPT_MESSAGES = 200
KEPT_TRANSCRIPT_CHARS = 512 * 1024
KEPT_AUDIT_ENTRIES = 1_000
KEPT_EVENTS = 2_000
#: A query page's budget of characters (its messages or entries).
PAGE_CHARS = 512 * 1024


def message_chars(message: AnyMessage) -> int:
    """About how much room a message takes: its text plus its tool calls' arguments."""
    content = message.content
    size = len(content) if isinstance(content, str) else len(json.dumps(content, default=str))
    if isinstance(message, AIMessage):
        size += sum(len(json.dumps(c["args"], default=str)) for c in message.tool_calls)
    return size


def model_view(content: str, limit: int = MODEL_RESULT_MAX_CHARS) -> str:
    """A tool result as the model reads it: whole up to ``limit`` characters, else its
    beginning and a note that says how much was left out and where the rest is."""
    if len(content) <= limit:
        return content
    return (
        content[:limit]
        + f"\n\n[Parley: this result is {len(content):,} characters long; you see the first "
        f"{limit:,}. The whole result is kept in the conversation's history. Ask the user, "
        "or call the tool with narrower arguments, if you need the rest.]"
    )


def turn_tool_result(tool_call_id: str, name: str, result: ToolResult) -> TurnToolResult:
    """The result as a turn reports it: content cut to ``PREVIEW_CHARS``, a payload
    over ``PAYLOAD_PREVIEW_BYTES`` left out; both say so."""
    content = result.content
    preview = TurnToolResult(
        tool_call_id=tool_call_id,
        name=name,
        status=result.status,
        content=content,
        payload=result.payload,
        error=result.error,
    )
    if len(content) > PREVIEW_CHARS:
        preview.content = content[:PREVIEW_CHARS] + f" [… {len(content):,} characters in all]"
        preview.content_chars = len(content)
    if result.payload is not None:
        size = len(json.dumps(result.payload, default=str, ensure_ascii=False).encode())
        if size > PAYLOAD_PREVIEW_BYTES:
            preview.payload = None
            preview.payload_omitted_bytes = size
    if result.error is not None and result.error.body is not None:
        size = len(json.dumps(result.error.body, default=str, ensure_ascii=False).encode())
        if size > PAYLOAD_PREVIEW_BYTES:
            preview.error = result.error.model_copy(update={"body": f"[{size:,} bytes left out]"})
    return preview


#: Streaming a reply (``call_model`` → its workflow, by signal): the first batch goes
#: this soon after the first text (a reply that arrives whole in one piece is never
#: streamed: it ends first), the second ``STREAM_BATCH_SECONDS`` after it, and each
#: later one twice as long after the one before, up to ``STREAM_BATCH_MAX_SECONDS``: the
#: first words show at once, and a long reply costs one signal a second. Each
#: batch is one signal, so one model call sends at most ``STREAM_BATCHES_PER_CALL``:
#: with ``MODEL_CALLS_PER_TURN_DEFAULT`` calls a turn spends at most 1,600 of the run's
#: signals, inside the 10,000 Temporal allows (``handover`` moves between turns at
#: 5,000). The text past the last batch arrives with the reply.
STREAM_FIRST_BATCH_SECONDS = 0.02
STREAM_BATCH_SECONDS = 0.25
STREAM_BATCH_MAX_SECONDS = 1.0
STREAM_BATCHES_PER_CALL = 200
#: What one batch may carry (UTF-8 bytes): a longer text waits for the next batches, so
#: no ``stream_delta`` comes near the payload store's threshold (128 KiB), and the
#: workflow refuses a bigger one. One call streams at most ``STREAM_BYTES_PER_CALL``;
#: the rest of a longer reply comes with the reply (which goes to the store when
#: large). A turn's streaming so costs at most 2 MiB of history.
STREAM_BATCH_MAX_BYTES = 16 * 1024
STREAM_BYTES_PER_CALL = 256 * 1024

#: What one model call may return (``call_model``): its reply as stored (text, tool
#: calls, metadata), in UTF-8 bytes (``PARLEY_MAX_MODEL_REPLY_BYTES``), and the calls
#: one reply may propose. Past either the call fails as a model error (non-retryable,
#: one line); a streamed reply is cut off as soon as it passes the bound. Every
#: proposed call becomes an activity (or a pending call), so an unbounded count would
#: grow the run's history without bound.
MODEL_REPLY_MAX_BYTES_DEFAULT = 1024 * 1024
#: A tool result whose encoded envelope is larger is cut, not run again
#: (``PARLEY_MAX_TOOL_RESULT_BYTES``).
TOOL_RESULT_MAX_BYTES_DEFAULT = 16 * 1024 * 1024
MODEL_TOOL_CALLS_PER_REPLY = 64
#: A provider's tool-call id longer than this is replaced by one of Parley's (ids live
#: in the pending calls, the audit log and the tool's idempotency key).
CALL_ID_MAX_CHARS = 128
#: An activity's failure message is written into history as is (it is not a payload,
#: so it never goes to the store): a tool's or a model's error is cut to this.
FAILURE_MESSAGE_MAX_CHARS = 4_000


def utf8_prefix(text: str, limit: int) -> str:
    """The longest beginning of ``text`` whose UTF-8 is at most ``limit`` bytes."""
    piece = text[: max(limit, 0)]
    while (excess := utf8_size(piece) - limit) > 0:
        piece = piece[: len(piece) - max(1, excess // 4)]
    return piece


def utf8_size(text: str) -> int:
    """``text``'s size in UTF-8 bytes (a lone surrogate counts as it would be sent)."""
    return len(text.encode("utf-8", "surrogatepass"))


def clipped(message: str, limit: int = FAILURE_MESSAGE_MAX_CHARS) -> str:
    """``message`` cut to ``limit`` characters, saying how long it was."""
    if len(message) <= limit:
        return message
    return message[:limit] + f" [… {len(message):,} characters in all]"
