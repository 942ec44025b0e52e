"""A slow scripted model at the model boundary, for the while-busy tests
(``tests/test_while_busy.py``). Runs in the test's own worker (same event loop).

Call N answers ``replies[N]`` when the script has one, else ``re: `` and the human
messages it was sent since the model's last message, joined by `` + ``. A call whose
number is in ``held`` first streams ``opening`` (its reply then starts with it) and
waits, sleeping in short steps, until the test releases it; a call cancelled meanwhile
records that it was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    message_chunk_to_message,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field


@dataclass
class HeldCall:
    #: The human messages sent since the model's last message, in order.
    humans: list[str]
    released: bool = False
    cancelled: bool = False
    answered: bool = False
    tools_seen: int = 0
    messages: list[str] = field(default_factory=list)


class HeldModel(BaseChatModel):
    replies: list[dict[str, Any]] = Field(default_factory=list)
    held: list[int] = Field(default_factory=list)
    opening: str = ""
    #: Shared by the copies ``bind_tools`` makes.
    calls: list[Any] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "parley-test-held"

    def bind_tools(self, tools: Any, **kwargs: Any) -> HeldModel:
        return self

    def release(self, number: int) -> None:
        self.calls[number].released = True

    def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        raise NotImplementedError("HeldModel is called asynchronously")

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        pieces = [chunk.message async for chunk in self._astream(messages)]
        reply = pieces[0]
        for piece in pieces[1:]:
            reply = reply + piece
        return ChatResult(generations=[ChatGeneration(message=message_chunk_to_message(reply))])

    async def _astream(
        self, messages: list[BaseMessage], *args: Any, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        number = len(self.calls)
        last_ai = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
        humans = [str(m.content) for m in messages[last_ai + 1 :] if isinstance(m, HumanMessage)]
        call = HeldCall(humans=humans, messages=[type(m).__name__ for m in messages])
        self.calls.append(call)
        script = self.replies[number] if number < len(self.replies) else None
        text = script.get("content", "") if script else "re: " + " + ".join(humans)
        try:
            if number in self.held:
                if self.opening:
                    yield ChatGenerationChunk(message=AIMessageChunk(content=self.opening))
                while not call.released:  # noqa: ASYNC110 - a slow model, released by the test
                    await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        call.answered = True
        chunks = [
            {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
            for i, c in enumerate((script or {}).get("tool_calls", []))
        ]
        yield ChatGenerationChunk(message=AIMessageChunk(content=text, tool_call_chunks=chunks))
