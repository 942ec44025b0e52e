"""``script:<file>``: a chat model that replays assistant messages from a JSON file.

Activity side. The file is a JSON list; each entry is
``{"content": "...", "tool_calls": [{"name": ..., "args": {...}, "id": ...}]}``.
The N-th model call of a conversation returns entry N, where N is the number of
assistant messages already in the transcript, so a replayed or retried call returns
the same message. It answers in the event loop (``_agenerate``), as a provider's async
client does, not in a thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import BaseModel, Field, ValidationError

from parley.contracts.errors import ModelRequestError
from parley.tools.loading import read_config_file


class ScriptedCall(BaseModel):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    id: str


class ScriptEntry(BaseModel):
    content: str = ""
    tool_calls: list[ScriptedCall] = Field(default_factory=list)


class ScriptFileChatModel(BaseChatModel):
    entries: list[ScriptEntry]
    source: str = "<inline>"

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptFileChatModel:
        file = Path(path)
        raw = read_config_file(file, "script model", "JSON")
        if not isinstance(raw, list):
            raise ValueError(f"script model: {file} must hold a JSON list of messages")
        try:
            entries = [ScriptEntry.model_validate(item) for item in raw]
        except ValidationError as err:
            raise ValueError(f"script model: {file} has a malformed entry: {err}") from err
        return cls(entries=entries, source=str(file))

    @property
    def _llm_type(self) -> str:
        return "parley-script-file"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptFileChatModel:
        return self  # the script already names its calls

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        index = sum(1 for m in messages if isinstance(m, AIMessage))
        if index >= len(self.entries):
            raise ModelRequestError(
                f"the script {self.source} has {len(self.entries)} messages and the "
                f"conversation asked for message {index + 1}"
            )
        entry = self.entries[index]
        message = AIMessage(
            content=entry.content,
            tool_calls=[
                {"name": c.name, "args": c.args, "id": c.id, "type": "tool_call"}
                for c in entry.tool_calls
            ],
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        # In the loop, as a provider's client answers: LangChain's default hands a model
        # with no ``_agenerate`` to a thread for each call (the benchmarks' fake LLM).
        return self._generate(messages, stop, **kw)
