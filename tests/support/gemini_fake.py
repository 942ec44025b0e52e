"""A real HTTP server speaking the Gemini API (``generativelanguage.googleapis.com``),
for tests.

``FakeGemini`` listens on 127.0.0.1 (a free port) in a background thread and answers
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` and
``POST /v1beta/models/{model}:generateContent`` from a queue of scripted answers:
model turns (text and/or ``functionCall`` parts) or errors; when the queue is empty a
``responder`` may answer (a ``Message``, a ``Failure``, or None for the "no scripted
answer left" error). It checks what the API checks first (the key, in
``x-goog-api-key``, answering a wrong one as Google does, ``400 INVALID_ARGUMENT`` with
the ``API_KEY_INVALID`` reason, and echoing the key presented, as a careless proxy
might, so that tests can check Parley never repeats it; a ``contents`` list) and
records every request, so tests can read what reached the provider (the system
instruction, the function declarations, the function responses).

As Gemini does, and so the real ``google-genai`` SDK and ``langchain-google-genai`` run:

- a stream is SSE ``data:`` lines of ``GenerateContentResponse`` JSON, written as they
  are made: a text part a word at a time, then each ``functionCall`` whole (with a
  ``thoughtSignature``, as thinking models send it), the last chunk with its
  ``finishReason``; ``chunk_delay`` seconds before each. Every chunk carries the usage
  so far (``usageMetadata``, cumulative, as Gemini reports it). Otherwise one JSON
  response.
- usage: ``promptTokenCount`` counted from the request (about 4 characters a token),
  ``candidatesTokenCount`` from the reply. Implicit caching: a request whose prefix
  (system instruction and tools) was seen before reports that prefix as
  ``cachedContentTokenCount`` (part of ``promptTokenCount``, as Gemini counts).
  ``usage_reported`` lists every final usage sent.
- errors as Google writes them, ``{"error": {"code", "message", "status", "details"}}``,
  a ``retry_delay`` as a ``google.rpc.RetryInfo`` detail; ``in_stream=True`` sends one
  as a ``data:`` line inside a 200 stream.
- with ``context_window`` set, a request whose input passes it is answered ``400
  INVALID_ARGUMENT`` "The input token count (N) exceeds the maximum number of tokens
  allowed (W)." (script untouched).

The server, its script, records and streams are ``tests.support.fake_provider``'s; this
module is the protocol alone.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_provider import FakeProvider, ProviderHandler
from tests.support.openai_script import RecordedRequest, StreamRecord

__all__ = ["Failure", "FakeGemini", "Message", "RecordedRequest", "StreamRecord"]

_PATH = re.compile(r"^/v1beta/models/([^/:]+):(streamGenerateContent|generateContent)$")
_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}
_STATUSES |= {404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL"}
_STATUSES |= {503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def signature_of(name: str) -> str:
    """The ``thoughtSignature`` the fake sends with a call of ``name`` (base64)."""
    return base64.b64encode(f"sig:{name}".encode()).decode()


@dataclass
class Message:
    text: str | None = None
    #: ``{"name", "args", "id"?}`` each, sent as ``functionCall`` parts after the text.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "STOP"
    chunk_delay: float | None = None


@dataclass
class Failure:
    code: int
    message: str
    status: str | None = None  # Google's status name; by default the code's
    headers: dict[str, str] = field(default_factory=dict)
    details: list[dict[str, Any]] = field(default_factory=list)
    #: Sent as a ``data:`` line inside a 200 stream (a stream request only).
    in_stream: bool = False

    def body(self) -> dict[str, Any]:
        error = {"code": self.code, "message": self.message}
        error["status"] = self.status or _STATUSES.get(self.code, "UNKNOWN")
        return {"error": {**error, **({"details": self.details} if self.details else {})}}


class FakeGemini(FakeProvider):
    """A scripted Gemini API server; a context manager, or start()/stop()."""

    default_api_key = "AIzaSyFake-gemini-key-000000000000000"

    # --- scripting -----------------------------------------------------------------

    def reply(
        self,
        text: str | None = None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        finish_reason: str = "STOP",
        chunk_delay: float | None = None,
    ) -> FakeGemini:
        return self._queue(Message(text, list(tool_calls or []), finish_reason, chunk_delay))

    def error(
        self,
        code: int,
        message: str,
        *,
        status: str | None = None,
        retry_delay: str | None = None,
        headers: dict[str, str] | None = None,
        in_stream: bool = False,
    ) -> FakeGemini:
        """A Google error; ``retry_delay`` (``"2s"``) as a ``RetryInfo`` detail."""
        details = []
        if retry_delay is not None:
            retry_info = "type.googleapis.com/google.rpc.RetryInfo"
            details.append({"@type": retry_info, "retryDelay": retry_delay})
        return self._queue(Failure(code, message, status, dict(headers or {}), details, in_stream))

    @property
    def generate_requests(self) -> list[RecordedRequest]:
        """The requests to generate content (``attempts`` counts them)."""
        return self.calls

    def _is_call(self, path: str) -> bool:
        return _PATH.match(path.split("?")[0]) is not None

    # --- serving -------------------------------------------------------------------

    def _exhausted(self) -> Failure:
        return Failure(400, "FakeGemini: no scripted answer left")

    def _usage(self, body: dict[str, Any]) -> dict[str, int]:
        """Prompt and cached tokens of a request (see the module's docstring)."""
        prefix = [body.get("systemInstruction"), body.get("tools")]
        cached = _tokens(prefix) if any(prefix) else 0
        hit = cached > 0 and self._seen(json.dumps(prefix, sort_keys=True))
        usage = {"promptTokenCount": _input_tokens(body)}
        return {**usage, "cachedContentTokenCount": cached} if hit else usage


class _Handler(ProviderHandler):
    owner: FakeGemini
    json_type = "application/json; charset=UTF-8"

    def _authorised(self) -> bool:
        presented = self.headers.get("x-goog-api-key", "")
        if presented == self.owner.api_key:
            return True
        reason = {"@type": "type.googleapis.com/google.rpc.ErrorInfo"}
        reason |= {"reason": "API_KEY_INVALID", "domain": "googleapis.com"}
        message = f"API key not valid ({presented}). Please pass a valid API key."
        self._error(Failure(400, message, details=[reason]))
        return False

    def _answer(self, request: RecordedRequest) -> None:
        body = request.body
        path, _, query = self.path.partition("?")
        route = _PATH.match(path)
        if route is None:
            return self._error(Failure(404, f"Not found: {path}"))
        if not isinstance(body, dict) or not body.get("contents"):
            return self._error(
                Failure(400, "* GenerateContentRequest.contents: contents is not specified")
            )
        window, size = self.owner.context_window, _input_tokens(body)
        request.input_tokens = size
        if self.owner._past_window(size):
            message = (
                f"The input token count ({size}) exceeds the maximum number of tokens "
                f"allowed ({window})."
            )
            return self._error(Failure(400, message))
        streamed = route.group(2) == "streamGenerateContent"
        answer = self.owner._next(request)
        if isinstance(answer, Failure):
            if answer.in_stream and streamed:
                return self._send_stream(iter([(True, answer.body())]), 0.0)
            return self._error(answer)
        n, model = self.owner._next_id(), route.group(1)
        parts = _parts(answer)
        usage = self.owner._usage(body)
        final = _so_far(usage, sum(_tokens([part]) for _, part in _pieces(parts)))
        if streamed:
            if "alt=sse" not in query:
                return self._error(Failure(400, "FakeGemini streams SSE only (alt=sse)"))
            chunks = _chunks(f"resp-{n:04d}", model, parts, answer.finish_reason, usage)
            return self._send_stream(chunks, self._pace(answer), lambda: self.owner._report(final))
        self.owner._report(final)
        self._send_json(200, _response(f"resp-{n:04d}", model, parts, answer.finish_reason, final))

    # --- protocol ------------------------------------------------------------------

    def _error(self, failure: Failure) -> None:
        self._send_json(failure.code, failure.body(), failure.headers)

    def _sse(self, chunk: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(chunk)}\r\n\r\n".encode()

    def _text_of(self, chunk: dict[str, Any]) -> str | None:
        """A text part's words (every chunk is a delta: each is paced and timed)."""
        parts = chunk.get("candidates", [{}])[0].get("content", {}).get("parts", [])
        return parts[0].get("text") if parts else None


FakeGemini.handler = _Handler


# --- the wire format ----------------------------------------------------------------


def _parts(answer: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": answer.text}] if answer.text else []
    for call in answer.tool_calls:
        function_call = {"name": call["name"], "args": call["args"]}
        if call.get("id"):
            function_call["id"] = call["id"]
        parts.append(
            {"functionCall": function_call, "thoughtSignature": signature_of(call["name"])}
        )
    return parts


def _response(
    response_id: str,
    model: str,
    parts: list[dict[str, Any]],
    finish: str | None,
    usage: dict[str, int],
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": response_id,
    }


def _chunks(
    response_id: str,
    model: str,
    parts: list[dict[str, Any]],
    finish: str,
    usage: dict[str, int],
) -> Iterator[tuple[bool, dict[str, Any]]]:
    """Gemini's chunks for one answer, each with the usage so far; ``(True, chunk)``:
    every chunk is a delta, paced and timed."""
    pieces = _pieces(parts) or [(False, {"text": ""})]
    written = 0
    for i, (_, part) in enumerate(pieces):
        written += _tokens([part]) if part != {"text": ""} else 0
        last = i == len(pieces) - 1
        chunk = _response(
            response_id, model, [part], finish if last else None, _so_far(usage, written)
        )
        yield True, chunk


def _pieces(parts: list[dict[str, Any]]) -> list[tuple[bool, dict[str, Any]]]:
    """The parts as streamed: text a word at a time, each function call whole."""
    pieces: list[tuple[bool, dict[str, Any]]] = []
    for part in parts:
        if "text" in part:
            pieces += [(True, {"text": w}) for w in re.findall(r"\s*\S+|\s+$", part["text"])]
        else:
            pieces.append((False, part))
    return pieces


def _so_far(usage: dict[str, int], output: int) -> dict[str, int]:
    total = usage["promptTokenCount"] + output
    return {**usage, "candidatesTokenCount": output, "totalTokenCount": total}


def _tokens(value: Any) -> int:
    """About 4 characters a token, as the JSON the request carries."""
    return math.ceil(len(json.dumps(value, ensure_ascii=False)) / 4)


def _input_tokens(body: dict[str, Any]) -> int:
    prefix = [body.get("systemInstruction"), body.get("tools")]
    return (_tokens(prefix) if any(prefix) else 0) + _tokens(body["contents"])
