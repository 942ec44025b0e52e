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

from parley.errors import TransientError


class FailsMidStream(BaseChatModel):
    """Streams ``text`` a word at a time; its first call breaks off after ``words_then_fail``
    words with a transient error (as a worker killed mid-stream, or a dropped
    connection), and Temporal retries it."""

    text: str
    words_then_fail: int
    calls: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "fails-mid-stream"

    def bind_tools(self, tools: Any, **kwargs: Any) -> FailsMidStream:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("streamed only")

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        self.calls.append(len(self.calls) + 1)
        for index, word in enumerate(re.findall(r"\s*\S+", self.text)):
            if len(self.calls) == 1 and index == self.words_then_fail:
                raise TransientError("the provider dropped the stream")
            await asyncio.sleep(0.05)
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))
