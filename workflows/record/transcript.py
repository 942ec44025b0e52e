"""The transcript: the one writer of the messages the model reads
(``ConversationState.transcript``). Workflow side (deterministic, no I/O).

Every message enters here, once: a person's (:meth:`Transcript.add_human`), the agent's
instructions of a subagent's task (:meth:`Transcript.add_system`), the model's reply with
the stored chain it now extends (:meth:`Transcript.add_reply`) and a tool call's answer
(:meth:`Transcript.add_result`, from the ledger, which answers every call). A rewind
keeps the first messages (:meth:`Transcript.cut`) and :meth:`Transcript.trim` keeps the
window bounded: only messages already in the stored chain leave it.
"""

from __future__ import annotations

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from parley.contracts import (
    KEPT_TRANSCRIPT_CHARS,
    KEPT_TRANSCRIPT_MESSAGES,
    ContextRef,
    message_chars,
)
from parley.contracts.conversation import TranscriptCut
from parley.contracts.state import TranscriptWindow


class Transcript:
    def __init__(self, window: TranscriptWindow) -> None:
        self._window = window

    def add_human(self, text: str, message_id: str) -> None:
        self._window.messages.append(HumanMessage(content=text, id=message_id))

    def add_system(self, text: str, message_id: str) -> None:
        self._window.messages.append(SystemMessage(content=text, id=message_id))

    def add_reply(self, ai: AIMessage, context: ContextRef | None) -> None:
        """The model's reply, and the stored chain as of its call (the messages before
        ``context.length`` are in the store)."""
        self._window.messages.append(ai)
        self._window.model_context = context

    def add_proposal(self, ai: AIMessage) -> None:
        """A call Parley proposes itself (a revert's inverse): unsent, so the next model
        call carries it into the stored chain like the results after it."""
        self._window.messages.append(ai)

    def add_result(self, message: ToolMessage) -> None:
        """A tool call's answer (the ledger's ``answer`` is the one caller)."""
        self._window.messages.append(message)

    def unsent(self) -> list[AnyMessage]:
        """The messages the stored chain does not hold yet: the next model call's."""
        window = self._window
        stored = window.model_context.length if window.model_context else 0
        return window.messages[stored - window.offset :]

    def answered(self) -> set[str]:
        """The ids of the tool calls answered among the kept messages."""
        return {m.tool_call_id for m in self._window.messages if isinstance(m, ToolMessage)}

    def cut(self, cut: TranscriptCut) -> int:
        """Keep the first ``cut.at`` messages (a rewind); returns the length before."""
        window = self._window
        before = window.length
        if cut.at >= window.offset:
            del window.messages[cut.at - window.offset :]
        else:  # the kept messages are older than the ones this run holds
            window.messages = list(cut.tail)
            window.offset = cut.at - len(cut.tail)
        compaction = window.model_context.compaction if window.model_context else None
        kept = compaction if compaction is not None and compaction.covers <= cut.at else None
        window.model_context = cut.context.model_copy(update={"compaction": kept})
        return before

    def trim(self) -> None:
        """Drop the oldest messages past the kept bounds: only those already in the
        stored transcript, never the latest model message."""
        window = self._window
        stored = window.model_context.length if window.model_context else 0
        last_ai = max(
            (i for i, m in enumerate(window.messages) if isinstance(m, AIMessage)), default=0
        )
        droppable = min(stored - window.offset, last_ai)
        chars = sum(message_chars(m) for m in window.messages)
        drop = 0
        while drop < droppable and (
            len(window.messages) - drop > KEPT_TRANSCRIPT_MESSAGES or chars > KEPT_TRANSCRIPT_CHARS
        ):
            chars -= message_chars(window.messages[drop])
            drop += 1
        window.drop_oldest(drop)
