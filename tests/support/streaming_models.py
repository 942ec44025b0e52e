"""Chat models at the model boundary for the streaming tests: scripted, streamed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from pydantic import Field

from parley.contracts.errors import TransientError


class StreamedOnly(BaseChatModel):
    """A model that only streams (``_astream``), offered any tools it ignores."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> StreamedOnly:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("streamed only")


class FailsMidStream(StreamedOnly):
    """Streams ``text`` a word at a time; its first call breaks off after ``words_then_fail``
    words with a transient error (as a worker killed mid-stream, or a dropped
    connection), and Temporal retries it."""

    text: str
    words_then_fail: int
    calls: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "fails-mid-stream"

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        self.calls.append(len(self.calls) + 1)
        for index, word in enumerate(re.findall(r"\s*\S+", self.text)):
            if len(self.calls) == 1 and index == self.words_then_fail:
                raise TransientError("the provider dropped the stream")
            await asyncio.sleep(0.05)
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))


class Trickle(StreamedOnly):
    """A reply that streams while other commands come: a message that starts
    with ``trickle`` is answered a word (`` trickle<n>``) every ``every`` seconds until
    ``released`` holds something (then `` done``); any other message at once, with
    ``own reply: <its first line>``."""

    every: float = 0.2
    words: int = 1_000
    released: list[bool] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "trickle"

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        text = str(next(m.content for m in reversed(messages) if m.type == "human"))
        if not text.startswith("trickle"):
            first_line = text.splitlines()[0]
            yield ChatGenerationChunk(message=AIMessageChunk(content=f"own reply: {first_line}"))
            return
        for number in range(self.words):
            if self.released:
                break
            yield ChatGenerationChunk(message=AIMessageChunk(content=f" trickle{number}"))
            await asyncio.sleep(self.every)
        yield ChatGenerationChunk(message=AIMessageChunk(content=" done"))


def trickle() -> Trickle:
    """``PARLEY_MODEL=tests.support.streaming_models:trickle`` (a worker process): it
    streams until the process ends."""
    return Trickle()
