"""The OpenAI chat-completions wire format, as ``FakeOpenAI`` writes it. Test support.

Plain builders, no I/O: error bodies, a whole ``chat.completion`` and the
``chat.completion.chunk`` events of a streamed one, and tool calls in the protocol's shape.
``tests.support.openai_fake`` serves them over HTTP.
"""

from __future__ import annotations

import json
import time
from typing import Any

OVERLOAD_2064 = {"error": {"code": "2064", "message": "当前服务集群负载较高"}}


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


def completion(
    n: int,
    model: str,
    content: str | None,
    calls: list[dict[str, Any]],
    finish_reason: str | None,
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
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chunks(
    n: int,
    model: str,
    content: str | None,
    calls: list[dict[str, Any]],
    finish_reason: str | None,
    include_usage: bool,
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` events of a streamed answer."""
    base = {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    events = [chunk({"role": "assistant", "content": content or ""})]
    for index, call in enumerate(calls):
        events.append(chunk({"tool_calls": [{"index": index, **call}]}))
    finish = finish_reason or ("tool_calls" if calls else "stop")
    events.append(chunk({}, finish))
    if include_usage:
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        events.append({**base, "choices": [], "usage": usage})
    return events


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
