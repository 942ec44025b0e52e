"""Providers that do not stream: a whole JSON body where a stream was asked for is read
as the stream it stands for. Activity side (the model's HTTP client).

Some OpenAI-compatible servers ignore ``"stream": true`` and answer with one
``chat.completion`` body (``application/json``). The ``openai`` SDK reads that body as
Server-Sent Events, finds none, and langchain-core ends the call with "No generation
chunks were returned" (``BaseChatModel.astream``, when the provider's stream yielded
nothing): the turn failed, though the provider had answered. The HTTP client Parley
gives ``ChatOpenAI`` (:class:`WholeBodiesAsyncClient`, and its sync twin) reads such a
body whole and hands the SDK the stream it asked for: one ``chat.completion.chunk``
carrying the whole message (text, tool calls, finish reason), one carrying the usage,
and ``[DONE]``; an error body becomes the SSE error the SDK raises. The reply then
arrives in one piece, as a reply that is not streamed does (``call_model`` streams
nothing of it), with its usage counted.

Chosen over catching the failure and calling the model again without streaming: the
provider has already written, and billed, the reply; a second call would pay for it
twice, take as long again, and could answer differently. Only a 200 whose content type
is not ``text/event-stream``, to a request whose JSON body asked for a stream, is read
whole: a real stream is never buffered.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai

_DROPPED_HEADERS = ("content-length", "content-encoding", "content-type", "transfer-encoding")


class WholeBodiesAsyncClient(openai.DefaultAsyncHttpxClient):
    """The SDK's default async client, reading a non-streamed answer to a stream."""

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        response = await super().send(request, **kwargs)
        if not _whole_answer_to_a_stream(request, response):
            return response
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        return _as_stream(request, response, body)


class WholeBodiesClient(openai.DefaultHttpxClient):
    """The SDK's default sync client, reading a non-streamed answer to a stream."""

    def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        response = super().send(request, **kwargs)
        if not _whole_answer_to_a_stream(request, response):
            return response
        try:
            body = response.read()
        finally:
            response.close()
        return _as_stream(request, response, body)


def _whole_answer_to_a_stream(request: httpx2.Request, response: httpx2.Response) -> bool:
    if response.status_code != 200:
        return False
    if "text/event-stream" in response.headers.get("content-type", "").lower():
        return False
    try:
        asked = json.loads(request.content)
    except (ValueError, TypeError, httpx2.RequestNotRead):
        return False
    return isinstance(asked, dict) and asked.get("stream") is True


def _as_stream(request: httpx2.Request, response: httpx2.Response, body: bytes) -> httpx2.Response:
    """A new response whose body is the SSE stream ``body`` stands for (``body`` as it
    was when it is no JSON object: the SDK then fails as it would have)."""
    try:
        whole = json.loads(body)
    except ValueError:
        whole = None
    headers = [
        (k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED_HEADERS
    ]
    if isinstance(whole, dict) and ("choices" in whole or "error" in whole):
        events = [whole] if "error" in whole else completion_chunks(whole)
        body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
        body += b"data: [DONE]\n\n"
        headers.append(("content-type", "text/event-stream"))
    else:
        headers.append(("content-type", response.headers.get("content-type", "application/json")))
    return httpx2.Response(
        200,
        headers=headers,
        content=body,
        request=request,
        extensions={"http_version": response.extensions.get("http_version", b"HTTP/1.1")},
    )


def completion_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """A ``chat.completion`` as the ``chat.completion.chunk`` events a stream of it
    would end with: every choice's whole message as one delta, then the usage."""
    base = {k: v for k, v in completion.items() if k not in ("choices", "usage", "object")}
    base["object"] = "chat.completion.chunk"
    choices = []
    for position, choice in enumerate(completion.get("choices") or []):
        delta = {k: v for k, v in (choice.get("message") or {}).items() if v is not None}
        if isinstance(delta.get("tool_calls"), list):
            delta["tool_calls"] = [
                {**call, "index": i} for i, call in enumerate(delta["tool_calls"])
            ]
        choices.append(
            {
                "index": choice.get("index", position),
                "delta": delta,
                "finish_reason": choice.get("finish_reason"),
                "logprobs": choice.get("logprobs"),
            }
        )
    events = [{**base, "choices": choices}]
    if completion.get("usage"):
        events.append({**base, "choices": [], "usage": completion["usage"]})
    return events
