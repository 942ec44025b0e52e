"""The OpenAI chat-completions wire format, as ``FakeOpenAI`` writes it. Test support.

Plain builders, no I/O: error bodies (``context_length_exceeded`` among them), a whole
``chat.completion``, the ``chat.completion.chunk`` events of a streamed one (one text
delta per word, tool-call arguments in small pieces, usage in a last chunk), tool calls in
the protocol's shape, and the token count the fake bills and bounds its window with.
``tests.support.openai_fake`` serves them over HTTP.

Tokens are counted with ``langchain_core.messages.utils.count_tokens_approximately``
(about 4 characters a token, plus 3 a message, the tools' schemas included): the count
Parley's client side falls back to where the model has no tokenizer. ``tiktoken`` is
installed but fetches its encodings over the network at first use, which CI cannot, so
the fake does not depend on it; a server built with another ``token_counter`` uses that.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from langchain_core.messages.utils import count_tokens_approximately

OVERLOAD_2064 = {"error": {"code": "2064", "message": "当前服务集群负载较高"}}

#: ``(messages, tools) -> tokens``: how a server counts a request's input.
TokenCounter = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], int]

#: Characters of tool-call arguments per streamed delta.
ARGUMENT_PIECE = 8


def approximate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """The request's input tokens as langchain-core approximates them. Tool-call
    arguments that are not JSON (a provider's broken call, sent back) count by their
    length, as the rest of the text does (langchain-core would refuse to read them)."""
    unreadable = 0
    readable = []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if calls:
            fixed = []
            for call in calls:
                arguments = call.get("function", {}).get("arguments", "")
                if not _is_json(arguments):
                    unreadable += math.ceil(len(arguments) / 4)
                    call = {**call, "function": {**call["function"], "arguments": "{}"}}
                fixed.append(call)
            message = {**message, "tool_calls": fixed}
        readable.append(message)
    return count_tokens_approximately(readable, tools=tools or None) + unreadable


def reply_tokens(content: str | None, calls: list[dict[str, Any]]) -> int:
    """The output tokens of an assistant message: its text, tool names and arguments at
    about 4 characters a token, plus 3 for the message, as langchain-core counts."""
    text = (content or "") + "".join(
        call["function"]["name"] + call["function"]["arguments"] for call in calls
    )
    return math.ceil(len(text) / 4) + 3


def _is_json(text: str) -> bool:
    try:
        json.loads(text or "{}")
    except ValueError:
        return False
    return True


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


def context_length_exceeded(window: int, tokens: int) -> dict[str, Any]:
    """OpenAI's ``400`` body for a request past the model's window, in its words."""
    body = error_body(
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages.",
        code="context_length_exceeded",
    )
    body["error"]["param"] = "messages"
    return body


def completion(
    n: int,
    model: str,
    content: str | None,
    calls: list[dict[str, Any]],
    finish_reason: str | None,
    billed: dict[str, int],
) -> dict[str, Any]:
    """A whole ``chat.completion`` (the answer to a request without ``stream``)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": billed,
    }


def chunks(
    n: int,
    model: str,
    content: str | None,
    calls: list[dict[str, Any]],
    finish_reason: str | None,
    billed: dict[str, int] | None,
) -> Iterator[tuple[bool, dict[str, Any]]]:
    """The ``chat.completion.chunk`` events of a streamed answer, each with whether it is
    a delta (a word of text or a piece of a tool call; the server paces those).

    As OpenAI sends them: the role first, then the text a word at a time, then each tool
    call's id and name followed by its arguments in pieces, then the finish reason; the
    usage (``billed``, when the request set ``stream_options.include_usage``) comes last
    in a chunk with no choices."""
    base = {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    yield False, chunk({"role": "assistant", "content": ""})
    for word in words(content or ""):
        yield True, chunk({"content": word})
    for index, call in enumerate(calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        function = call["function"]
        yield True, chunk({"tool_calls": [{**head, "function": {"name": function["name"]}}]})
        for piece in pieces(function["arguments"], ARGUMENT_PIECE):
            yield True, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield False, chunk({}, finish_reason or ("tool_calls" if calls else "stop"))
    if billed is not None:
        yield False, {**base, "choices": [], "usage": billed}


def words(text: str) -> list[str]:
    """``text`` cut before each word; joined they give it back exactly."""
    return re.findall(r"\s*\S+|\s+$", text)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def wire_tool_calls(calls: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``{"name", "args", "id"?}`` dicts as the protocol's ``tool_calls``."""
    wire = []
    for i, call in enumerate(calls):
        args = call.get("args", {})
        wire.append(
            {
                "id": call.get("id") or f"call_fake_{n}_{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    return wire
