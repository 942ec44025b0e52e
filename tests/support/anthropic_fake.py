"""A real HTTP server speaking Anthropic's Messages API, for tests.

``FakeAnthropic`` listens on 127.0.0.1 (a free port) in a background thread and answers
``POST /v1/messages`` from a queue of scripted answers: assistant messages (text and/or
``tool_use`` blocks) or errors; when the queue is empty a ``responder`` may answer (a
``Message``, a ``Failure``, or None for the "no scripted answer left" error). It
checks what the API checks first (the key, in ``x-api-key`` or, as the ``anthropic``
SDK 2 sends it, ``Authorization: Bearer``, answering a wrong key with
``401 authentication_error``, which here echoes the key presented, as a careless
provider might, so that tests can check Parley never repeats it; the
``anthropic-version`` header; ``model``, ``max_tokens`` and ``messages``) and records
every request, so tests can read what reached the provider (``cache_control`` on the
system prompt and the tools, the system prompt itself, the tool results).

As Anthropic does, and so the real ``anthropic`` SDK and ``langchain-anthropic`` run:

- ``stream: true`` is answered with Anthropic's SSE events, written as they are made:
  ``message_start`` (usage so far), per block ``content_block_start``, ``ping``,
  ``content_block_delta`` (``text_delta`` a word at a time, ``input_json_delta`` a
  tool's arguments in pieces), ``content_block_stop``, then ``message_delta`` (stop
  reason and the whole usage) and ``message_stop``; ``chunk_delay`` seconds before each
  delta. Otherwise one JSON ``message``.
- usage: input counted from the request (about 4 characters a token), output from the
  reply. A prompt cache: the request's prefix up to its last ``cache_control`` mark on
  a tool or system block (Anthropic's order: tools, then system, then messages) is
  written to the cache the first time (``cache_creation_input_tokens``) and read from
  it after (``cache_read_input_tokens``); ``input_tokens`` is the rest, as Anthropic
  counts. ``usage_reported`` lists every usage sent.
- errors as Anthropic writes them, ``{"type": "error", "error": {"type", "message"}}``,
  with ``request-id`` and any headers (``retry-after``); ``in_stream=True`` sends one in
  a 200 stream, as an ``error`` event after ``message_start`` (Anthropic's mid-stream
  ``overloaded_error``).
- with ``context_window`` set, a request whose input passes it is answered ``400
  invalid_request_error`` "prompt is too long: N tokens > W maximum" (script untouched).

The server, its script, records and streams are ``tests.support.fake_provider``'s; this
module is the protocol alone.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_provider import FakeProvider, ProviderHandler
from tests.support.openai_script import RecordedRequest, StreamRecord

__all__ = ["Failure", "FakeAnthropic", "Message", "RecordedRequest", "StreamRecord"]

ARGUMENT_PIECE = 8  # characters of a tool's JSON arguments per input_json_delta


@dataclass
class Message:
    text: str | None = None
    #: ``{"name", "args", "id"?}`` each, sent as ``tool_use`` blocks after the text.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    chunk_delay: float | None = None


@dataclass
class Failure:
    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    #: Sent as an SSE ``error`` event inside a 200 stream (a stream request only).
    in_stream: bool = False


class FakeAnthropic(FakeProvider):
    """A scripted Anthropic Messages API server; a context manager, or start()/stop()."""

    default_api_key = "sk-ant-fake-key-0000"

    # --- scripting -----------------------------------------------------------------

    def reply(
        self,
        text: str | None = None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        stop_reason: str | None = None,
        chunk_delay: float | None = None,
    ) -> FakeAnthropic:
        return self._queue(Message(text, list(tool_calls or []), stop_reason, chunk_delay))

    def error(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
        in_stream: bool = False,
    ) -> FakeAnthropic:
        all_headers = dict(headers or {})
        if retry_after is not None:
            all_headers["retry-after"] = str(retry_after)
        return self._queue(Failure(status, error_type, message, all_headers, in_stream))

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The requests to ``/v1/messages`` (``attempts`` counts them)."""
        return self.calls

    def _is_call(self, path: str) -> bool:
        return path.split("?")[0].rstrip("/") == "/v1/messages"

    # --- serving -------------------------------------------------------------------

    def _exhausted(self) -> Failure:
        return Failure(400, "invalid_request_error", "FakeAnthropic: no scripted answer left")

    def _usage(self, body: dict[str, Any], output_tokens: int) -> dict[str, int]:
        """The request's usage, through the prompt cache (see the module's docstring)."""
        blocks = _prefix_blocks(body)
        marked = [i for i, b in enumerate(blocks) if isinstance(b, dict) and b.get("cache_control")]
        total = _input_tokens(body)
        prefix = blocks[: marked[-1] + 1] if marked else []
        cached = sum(map(_tokens, prefix))
        key = json.dumps([_unmarked(b) for b in prefix], sort_keys=True)
        hit = bool(prefix) and self._seen(key)
        return self._report(
            {
                "input_tokens": total - cached,
                "cache_creation_input_tokens": 0 if hit else cached,
                "cache_read_input_tokens": cached if hit else 0,
                "output_tokens": output_tokens,
            }
        )


class _Handler(ProviderHandler):
    owner: FakeAnthropic
    stream_headers = (("Cache-Control", "no-cache"), ("request-id", "req_fake"))

    def _authorised(self) -> bool:
        bearer = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        presented = self.headers.get("x-api-key") or bearer
        if presented == self.owner.api_key:
            return True
        self._error(401, "authentication_error", f"invalid x-api-key {presented}")
        return False

    def _answer(self, request: RecordedRequest) -> None:
        body = request.body
        if not self.owner._is_call(self.path):
            return self._error(404, "not_found_error", f"Not found: {self.path}")
        if not self.headers.get("anthropic-version"):
            return self._error(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        for name in ("model", "max_tokens", "messages"):
            if not isinstance(body, dict) or name not in body:
                return self._error(400, "invalid_request_error", f"{name}: Field required")
        window, size = self.owner.context_window, _input_tokens(body)
        request.input_tokens = size
        if self.owner._past_window(size):
            message = f"prompt is too long: {size} tokens > {window} maximum"
            return self._error(400, "invalid_request_error", message)
        answer = self.owner._next(request)
        if isinstance(answer, Failure):
            if answer.in_stream and body.get("stream"):
                nothing = {"input_tokens": 0, "output_tokens": 0}
                start = _message_start(f"msg_{self.owner._next_id():04d}", body, nothing)
                error = {"type": "error", "error": _error_of(answer)}
                return self._send_stream(iter([(False, start), (False, error)]), 0.0)
            return self._error(answer.status, answer.error_type, answer.message, answer.headers)
        n = self.owner._next_id()
        blocks = _content(answer, n)
        usage = self.owner._usage(body, _tokens(blocks))
        stop = answer.stop_reason or ("tool_use" if answer.tool_calls else "end_turn")
        if body.get("stream"):
            events = _events(f"msg_{n:04d}", body, blocks, stop, usage)
            return self._send_stream(events, self._pace(answer))
        whole = {
            **_message_start(f"msg_{n:04d}", body, usage)["message"],
            "content": blocks,
            "stop_reason": stop,
        }
        self._send_json(200, whole)

    # --- protocol ------------------------------------------------------------------

    def _error(
        self, status: int, error_type: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        body = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": "req_fake",
        }
        self._send_json(status, body, {"request-id": "req_fake", **(headers or {})})

    def _sse(self, event: dict[str, Any]) -> bytes:
        return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

    def _text_of(self, event: dict[str, Any]) -> str | None:
        delta = event["delta"]
        return delta["text"] if delta.get("type") == "text_delta" else None


FakeAnthropic.handler = _Handler


# --- the wire format ----------------------------------------------------------------


def _content(answer: Message, n: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": answer.text}] if answer.text else []
    for i, call in enumerate(answer.tool_calls):
        call_id = call.get("id") or f"toolu_{n:04d}_{i}"
        blocks.append(
            {"type": "tool_use", "id": call_id, "name": call["name"], "input": call["args"]}
        )
    return blocks


def _message_start(message_id: str, body: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": dict(usage),
    }
    return {"type": "message_start", "message": message}


def _events(
    message_id: str,
    body: dict[str, Any],
    blocks: list[dict[str, Any]],
    stop: str,
    usage: dict[str, int],
) -> Iterator[tuple[bool, dict[str, Any]]]:
    """Anthropic's events for one message; ``(is a delta, event)``."""
    yield False, _message_start(message_id, body, {**usage, "output_tokens": 1})
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            yield False, {"type": "content_block_start", "index": index, "content_block": opening}
            if index == 0:
                yield False, {"type": "ping"}
            for word in re.findall(r"\s*\S+|\s+$", block["text"]):
                yield True, _delta(index, {"type": "text_delta", "text": word})
        else:
            opening = {**block, "input": {}}
            yield False, {"type": "content_block_start", "index": index, "content_block": opening}
            arguments = json.dumps(block["input"])
            for at in range(0, len(arguments), ARGUMENT_PIECE):
                piece = arguments[at : at + ARGUMENT_PIECE]
                yield True, _delta(index, {"type": "input_json_delta", "partial_json": piece})
        yield False, {"type": "content_block_stop", "index": index}
    delta = {"stop_reason": stop, "stop_sequence": None}
    yield False, {"type": "message_delta", "delta": delta, "usage": usage}
    yield False, {"type": "message_stop"}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _error_of(failure: Failure) -> dict[str, str]:
    return {"type": failure.error_type, "message": failure.message}


def _system_blocks(system: Any) -> list[Any]:
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return list(system or [])


def _unmarked(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


def _tokens(value: Any) -> int:
    """About 4 characters a token, as the JSON the request carries; marks not counted."""
    if isinstance(value, list):
        value = [_unmarked(v) for v in value]
    return math.ceil(len(json.dumps(_unmarked(value), ensure_ascii=False)) / 4)


def _input_tokens(body: dict[str, Any]) -> int:
    return sum(map(_tokens, _prefix_blocks(body))) + _tokens(body["messages"])


def _prefix_blocks(body: dict[str, Any]) -> list[Any]:
    """The tools, then the system blocks: the order of Anthropic's prompt cache."""
    return [*(body.get("tools") or []), *_system_blocks(body.get("system"))]
