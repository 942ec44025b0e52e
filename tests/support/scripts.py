"""Scripted models for workflow tests (the model is the only fake): a script answering
call by call, a tool call of a script, and one script per conversation
(``ByConversation``). Client side: the tests hand these to a real worker."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel


def script(*entries: dict[str, Any]) -> ScriptFileChatModel:
    """A model that answers the N-th call with entries[N]."""
    return ScriptFileChatModel(entries=[ScriptEntry.model_validate(e) for e in entries])


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "args": args}


#: (first human message of the conversation, tool names it was offered), per call of a
#: ``ByConversation`` model.
OFFERED: list[tuple[str, list[str]]] = []


class ByConversation(BaseChatModel):
    """Scripted models, one per conversation: the conversation's first human message
    (the user's message, or a subagent's task) picks the script. Records in ``OFFERED``
    the tools each call was offered."""

    scripts: dict[str, ScriptFileChatModel]
    offered: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "parley-test-by-conversation"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ByConversation:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.model_copy(update={"offered": names})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        first = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
        OFFERED.append((first, list(self.offered)))
        return self.scripts[first]._generate(messages)
