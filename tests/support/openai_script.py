"""What ``FakeOpenAI`` is scripted with (replies, errors, a responder for an empty
script) and what every fake provider records (requests, streams; see
``tests.support.fake_provider``). Test support; plain data."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RecordedRequest:
    """One HTTP request the fake received; ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: The request's input as the fake counts it (chat completions only).
    input_tokens: int | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []


@dataclass
class ScriptedReply:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    delay: float = 0.0
    #: Seconds before each streamed delta; None: the server's ``chunk_delay``.
    chunk_delay: float | None = None


@dataclass
class ScriptedError:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class StreamRecord:
    """What one streamed answer wrote: its text deltas, when each delta (text or
    tool-call piece) left, and whether the stream ended (``done``) whole
    (``completed``; False when the client went away mid-stream)."""

    text_deltas: list[str] = field(default_factory=list)
    delta_times: list[float] = field(default_factory=list)  # time.monotonic()
    done: threading.Event = field(default_factory=threading.Event)
    completed: bool = False

    @property
    def text(self) -> str:
        return "".join(self.text_deltas)


#: Answers a request when the script is empty: a reply, an error, or None for the
#: "no scripted response left" error.
Responder = Callable[[RecordedRequest], "ScriptedReply | ScriptedError | None"]
