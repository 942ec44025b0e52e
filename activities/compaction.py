"""A bounded model context: what the model sees of a long conversation, and the
``compact_context`` activity that shortens it. Activity side.

Every message stays whole in the transcript chain (``show``, the page and the gateway
read them all); the model sees the chain through its latest :class:`Compaction`: a
summary in place of the oldest messages, then the rest as they are. ``call_model``
counts the tokens of that view (the model's tokenizer where the worker has one, else
``count_tokens_approximately``) and, when it would pass the budget less the room kept
for the reply, does not call the model: it returns ``over_budget`` and the workflow runs
``compact_context``, its own activity, so the summary is retried, recorded in history
and seen in the Temporal UI.

Compaction keeps the latest ``keep_latest`` messages whole (unless they alone pass the
budget: then the view may start at the user's latest message) and cuts only before a
human message, so an AI message and the tool messages that answer it are never split. It
aims at half the budget (a quarter when the provider refused a first compaction), so
a conversation compacts every few turns, not on every one. If even the smallest view
(the summary and the latest messages) cannot fit, the turn fails with one line naming
the budget and the conversation goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from temporalio import activity
from temporalio.exceptions import ApplicationError

from parley.activities.heartbeat import heartbeating
from parley.contracts import (
    COMPACT_CONTEXT,
    ClientContext,
    CompactContextInput,
    Compaction,
    ContextRef,
    Usage,
    text_of,
)
from parley.contracts.errors import ErrorType
from parley.storage import TranscriptStore

if TYPE_CHECKING:  # only named: compaction uses the models the worker built
    from parley.activities.models.failover import ListedModels

#: How the summary is introduced to the model, in place of the messages it replaces.
SUMMARY_HEADING = "Summary of the earlier conversation (its messages are not shown):"
SUMMARY_INSTRUCTIONS = (
    "You compact a conversation between a user and an assistant that uses tools. Write "
    "a concise summary of the conversation below: the user's goals, decisions, facts "
    "learned from tool results, and what is still open. Keep names, ids and numbers "
    "exactly. Reply with the summary only."
)
#: A tool result is shown to the summarizer cut to this many characters.
SUMMARIZED_RESULT_CHARS = 600
SUMMARY_MAX_CHARS = 8_000

Counter = Callable[[Sequence[BaseMessage]], int]

#: Context windows of known models, in tokens (``PARLEY_MODEL_CONTEXT_TOKENS`` wins).
KNOWN_WINDOWS = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-3.5-turbo": 16_385,
    "deepseek-chat": 64_000,
}
#: A model the table does not know: a provider's refusal still compacts (``harder``).
DEFAULT_CONTEXT_TOKENS = 128_000


def known_window(model: str) -> int | None:
    """``openai:gpt-4o-mini`` → 128,000; None for a model the table does not know."""
    return KNOWN_WINDOWS.get(model.partition(":")[2].strip() or model.strip())


@dataclass(frozen=True)
class ContextBudget:
    """A model's context window in tokens, the room kept for its reply, and how many
    of the latest messages always reach it whole."""

    tokens: int
    reply_tokens: int = 4_096
    keep_latest: int = 6

    @property
    def input_tokens(self) -> int:
        return max(self.tokens - self.reply_tokens, 1)


def token_counter(model: Any) -> Counter:
    """The model's own count where it has one that works offline, else LangChain's
    approximation (about four characters a token)."""

    def approximate(messages: Sequence[BaseMessage]) -> int:
        return count_tokens_approximately(messages)

    return approximate


def model_view(
    messages: list[AnyMessage], compaction: Compaction | None, instructions: str | None = None
) -> list[AnyMessage]:
    """What the model is sent: the agent's ``instructions`` as the system message, the
    transcript's system messages, the summary in place of the first ``covers`` messages,
    then the rest. The instructions are not in the transcript: no summary replaces them."""
    system = [SystemMessage(content=instructions)] if instructions else []
    if compaction is None:
        return [*system, *messages]
    head = [m for m in messages[: compaction.covers] if isinstance(m, SystemMessage)]
    summary = HumanMessage(content=f"{SUMMARY_HEADING}\n{compaction.summary}")
    return [*system, *head, summary, *messages[compaction.covers :]]


#: How the front end's context for a turn (``ClientContext``) is introduced to the model.
CLIENT_CONTEXT_HEADING = "Context from the user's application for this turn:"


def with_client_context(view: list[AnyMessage], context: list[ClientContext]) -> list[AnyMessage]:
    """The view with the front end's context for this turn as a system message after the
    system prompt (never stored: the next turn brings its own)."""
    if not context:
        return view
    lines = [CLIENT_CONTEXT_HEADING, *(f"- {c.description}: {c.value}" for c in context)]
    lead = next((i for i, m in enumerate(view) if not isinstance(m, SystemMessage)), len(view))
    return [*view[:lead], SystemMessage(content="\n".join(lines)), *view[lead:]]


def cut_points(messages: list[AnyMessage], start: int, keep_latest: int) -> list[int]:
    """Where the view may start after a summary: before a human message, at or after
    ``start``, leaving at least ``keep_latest`` messages whole."""
    last = len(messages) - keep_latest
    return [i for i in range(max(start, 1), last + 1) if isinstance(messages[i], HumanMessage)]


def summarizer_input(previous: str | None, messages: list[AnyMessage]) -> str:
    """The messages to summarize as plain text, long tool results cut (with their size)."""
    lines = [f"Earlier summary:\n{previous}\n"] if previous else []
    for message in messages:
        text = text_of(message) if isinstance(message, AIMessage) else str(message.content)
        if isinstance(message, ToolMessage) and len(text) > SUMMARIZED_RESULT_CHARS:
            text = f"{text[:SUMMARIZED_RESULT_CHARS]}… [{len(text)} characters in all]"
        if isinstance(message, AIMessage):
            calls = ", ".join(f"{c['name']}({c['args']})" for c in message.tool_calls)
            text = f"{text} [calls: {calls}]" if calls else text
        lines.append(f"{message.type}: {text}")
    return "\n".join(lines)


class CompactionActivities:
    def __init__(
        self,
        models: ListedModels,
        transcripts: TranscriptStore,
        budget: ContextBudget,
        failure: Callable[[Exception, int], ApplicationError],
        count: Counter | None = None,
    ) -> None:
        self._models = models  # the summary is written by the model the workflow chose
        self._transcripts = transcripts
        self._budget = budget
        self._failure = failure  # ``call_model``'s one mapping (the model's index)
        self._count = count or token_counter(models.first)

    def over_budget(self, view: list[AnyMessage]) -> int | None:
        """By how many tokens ``view`` passes the budget (None: it fits)."""
        needed = self._count(view)
        return needed - self._budget.input_tokens if needed > self._budget.input_tokens else None

    @activity.defn(name=COMPACT_CONTEXT)
    async def compact_context(self, request: CompactContextInput) -> ContextRef:
        async with heartbeating():
            info = activity.info()
            context = request.context
            if request.new_messages:
                context = await self._transcripts.append(
                    context,
                    list(request.new_messages),
                    workflow_id=info.workflow_id,
                    namespace=info.namespace,
                )
            assert context is not None  # a conversation has at least its first message
            messages = await self._transcripts.load(context)
            compaction = await self._compaction(
                messages, context, request.harder, request.instructions, request.model
            )
            return context.model_copy(update={"compaction": compaction})

    async def _compaction(
        self,
        messages: list[AnyMessage],
        context: ContextRef,
        harder: bool,
        instructions: str | None = None,
        model: str | None = None,
    ) -> Compaction:
        previous = context.compaction
        start = previous.covers if previous else 0
        before = self._count(model_view(messages, previous, instructions))
        # Half the budget; after a provider's refusal, a quarter, and at most half of
        # the view it refused (a budget larger than the provider's window happens).
        target = self._budget.input_tokens // 2
        if harder:
            target = min(self._budget.input_tokens // 4, before // 2)
        reserve = SUMMARY_MAX_CHARS // 4
        # The latest messages whole; when they alone pass the budget (one huge message),
        # the view may start as late as the user's latest message.
        points = cut_points(messages, start + 1, self._budget.keep_latest)
        late = cut_points(messages, start + 1, 1)
        if not late:
            raise self._cannot_fit(before)
        cut = next(
            (i for i in points if self._count(messages[i:]) + reserve <= target),
            next(
                (i for i in late if self._count(messages[i:]) + reserve <= target),
                late[-1],
            ),
        )
        summary, usage = await self._summarize(
            previous.summary if previous else None, messages[start:cut], model
        )
        compaction = Compaction(
            covers=cut, summary=summary, tokens_before=before, tokens_after=0, usage=usage
        )
        after = self._count(model_view(messages, compaction, instructions))
        if after > self._budget.input_tokens:
            raise self._cannot_fit(after)
        return compaction.model_copy(update={"tokens_after": after})

    async def _summarize(
        self, previous: str | None, messages: list[AnyMessage], model: str | None = None
    ) -> tuple[str, Usage]:
        text = summarizer_input(previous, messages)
        room = self._budget.input_tokens // 2 * 4  # characters, at about four a token
        if len(text) > room:
            text = f"[the oldest {len(text) - room} characters are left out]\n{text[-room:]}"
        index = self._models.index_of(model)
        try:
            reply = await self._models.models[index].ainvoke(
                [SystemMessage(content=SUMMARY_INSTRUCTIONS), HumanMessage(content=text)]
            )
        except Exception as exc:
            raise self._failure(exc, index) from None
        summary = text_of(reply)[:SUMMARY_MAX_CHARS].strip() or "(nothing to summarize)"
        return summary, Usage.of_call(reply).under(self._models.name(index))

    def _cannot_fit(self, tokens: int) -> ApplicationError:
        return ApplicationError(
            f"the conversation's latest messages need about {tokens} tokens, more than "
            f"the model's context budget of "
            f"{self._budget.input_tokens} ({self._budget.tokens} less "
            f"{self._budget.reply_tokens} kept for the reply; PARLEY_MODEL_CONTEXT_TOKENS); "
            "send a shorter message, or use a model with a larger window",
            type=ErrorType.CONTEXT_LENGTH_EXCEEDED,
            non_retryable=True,
        )
