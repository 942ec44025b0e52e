"""Conversations longer than the window a workflow keeps (``KEPT_TRANSCRIPT_MESSAGES``),
made cheaply: a scripted model (``Reads``) whose one reply proposes many calls of an
auto tool, so a few turns pass the window. For the fork, rewind and retention tests.
Client side: the tests hand the model to a real worker."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from parley.client import Conversations
from parley.contracts import KEPT_TRANSCRIPT_MESSAGES, StateQuery

#: The first turn's calls (so message 5 is the first cut after its answers) and the
#: later turns' (so few turns pass the window).
FIRST_CALLS, LATER_CALLS, LATER_TURNS = 3, 20, 9


class Reads(BaseChatModel):
    """``read <n>``: n ``read_records`` calls (an auto tool) in one reply; ``page <n>``:
    one ``big_page`` call of n characters (``tests.support.store_tools``, claim-checked
    when large); a tool's answers are met with ``done``, anything else with
    ``re: <text>``. Call ids are unique in a conversation."""

    @property
    def _llm_type(self) -> str:
        return "parley-test-reads"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Reads:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        last = messages[-1]
        text = str(last.content)
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        if isinstance(last, ToolMessage):
            reply = AIMessage(content="done")
        elif calls := _calls(text, turn):
            reply = AIMessage(content="", tool_calls=calls)
        else:
            reply = AIMessage(content=f"re: {text}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _calls(text: str, turn: int) -> list[dict[str, Any]]:
    if text.startswith("read "):
        return [
            {"name": "read_records", "args": {}, "id": f"b{turn}-{n}"} for n in range(int(text[5:]))
        ]
    if text.startswith("page "):
        return [{"name": "big_page", "args": {"n": 1, "size": int(text[5:])}, "id": f"p{turn}"}]
    return []


async def longer_than_the_window(conv: Conversations, sid: str, user: str = "alice") -> int:
    """Turns of auto calls until the conversation is longer than the window; its
    length. Message 5 is a valid cut (after the first turn's message, call and 3
    answers) and older than the window."""
    assert (await conv.send(sid, user, f"read {FIRST_CALLS}")).reply == "done"
    for _ in range(LATER_TURNS):
        assert (await conv.send(sid, user, f"read {LATER_CALLS}")).reply == "done"
    total = 3 + FIRST_CALLS + LATER_TURNS * (LATER_CALLS + 3)
    head = await conv.state(sid, user, StateQuery(user_id=user, transcript_limit=1))
    assert head.transcript_total == total > KEPT_TRANSCRIPT_MESSAGES + 5
    assert head.transcript_offset > 5  # message 5 is older than the window
    return total
