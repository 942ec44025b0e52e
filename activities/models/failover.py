"""The models ``PARLEY_MODEL`` lists, built once when the worker starts, and what the model
activities do for failover (issue 35, point 4; ``parley.contracts.failover``). Activity
side: the workflow chooses the model of each call (``CallModelInput.model``); here the
worker answers with that model, says which one answered (usage per model), offers the
next one in a failure's details when the failure is one that fails over
(:func:`fails_over`), and converts the messages another provider wrote.

Which failures fail over, once Temporal's retries are spent or at once when not retried:
transient ones (rate limits, overloads such as Anthropic's 529, 5xx, timeouts,
connections refused), and refusals that are the provider's (HTTP 401, 402, 403, 404,
429 ``insufficient_quota``). The request's own faults do not (400, 409, 413, 422), nor
a context overflow (it compacts), a reply past Parley's bound or an unknown error.

Tools and context carry over: the transcript is langchain-core messages, and a reply's
calls are its ``tool_calls``, which every provider's client sends in its own form. A
provider's own parts of a message's content (Anthropic's list of blocks) are sent as
they are to the provider that wrote them; to another, the message's content becomes its
text, each ``tool_use`` block being one of its ``tool_calls``, and any other part (a
``thinking`` block, say) a line saying what was not carried over, never dropped
silently. The stored transcript keeps every part as it was written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage

from parley.activities.models import build_chat_model
from parley.contracts.errors import (
    ContextLengthExceeded,
    ModelReplyTooLarge,
    ParleyError,
    TransientError,
)
from parley.contracts.failover import (
    DEFAULT_COOLDOWN_SECONDS,
    FAILOVER_STATUSES,
    FailoverOffer,
    model_specs,
)
from parley.tools.loading import ModelAccess


@dataclass(frozen=True)
class ListedModels:
    """The worker's models in ``PARLEY_MODEL`` order, and the cool-down it offers."""

    specs: tuple[str, ...]
    models: tuple[BaseChatModel, ...]
    cooldown_seconds: float = DEFAULT_COOLDOWN_SECONDS

    @classmethod
    def of(cls, model: BaseChatModel | ListedModels) -> ListedModels:
        """A worker given one model (tests, ``parley dev``) lists just it."""
        if isinstance(model, ListedModels):
            return model
        return cls(("",), (model,))

    @property
    def first(self) -> BaseChatModel:
        return self.models[0]

    def index_of(self, spec: str | None) -> int:
        """The model a call asks for; None, or a spec this worker does not list (a
        deploy changed the list), is the first."""
        return self.specs.index(spec) if spec and spec in self.specs else 0

    def name(self, index: int) -> str | None:
        """The spec usage is counted under; None on a worker with one model."""
        return self.specs[index] if len(self.specs) > 1 else None

    def offer(self, index: int) -> FailoverOffer | None:
        """What a failure of model ``index`` offers the workflow (None: one model)."""
        if len(self.specs) < 2:
            return None
        return FailoverOffer(
            model=self.specs[index],
            models=list(self.specs),
            cooldown_seconds=self.cooldown_seconds,
        )


def build_chat_models(
    value: str, access: ModelAccess | None, cooldown_seconds: float
) -> ListedModels:
    """Every model ``PARLEY_MODEL`` lists, built now: a spec that cannot be built is one
    ``ValueError`` naming it (and its place in a list), before the worker starts."""
    specs = model_specs(value)
    if not specs:
        raise ValueError("PARLEY_MODEL is empty: name a model, or several separated by commas")
    if len(set(specs)) != len(specs):
        raise ValueError(f"PARLEY_MODEL={value!r} lists a model twice")
    models = []
    for number, spec in enumerate(specs, start=1):
        try:
            models.append(build_chat_model(spec, access))
        except Exception as problem:
            if len(specs) == 1:
                raise  # as before lists: the worker names PARLEY_MODEL in one line
            reason = str(problem).removeprefix(f"PARLEY_MODEL={spec!r}").lstrip(": ")
            if not isinstance(problem, ValueError):
                reason = f"{type(problem).__name__}: {problem}"
            raise ValueError(
                f"PARLEY_MODEL={value!r}: model {number} of {len(specs)}, {spec!r}: {reason}"
            ) from None
    return ListedModels(tuple(specs), tuple(models), cooldown_seconds)


def fails_over(classified: ParleyError | None) -> bool:
    """Whether a failed call should move the conversation to the next model: see the
    module's table."""
    if isinstance(classified, ContextLengthExceeded | ModelReplyTooLarge):
        return False
    if isinstance(classified, TransientError):
        return True
    return classified is not None and classified.http_status in FAILOVER_STATUSES


def provider_of(model: Any) -> str | None:
    """The provider a model's client speaks to (langchain's ``ls_provider``:
    ``anthropic``, ``openai``, ...), which its replies carry as ``model_provider``."""
    try:
        provider = model._get_ls_params().get("ls_provider")
    except Exception:
        return None
    return provider if isinstance(provider, str) else None


def carried_over(messages: Sequence[AnyMessage], provider: str | None) -> list[AnyMessage]:
    """The model's view for ``provider``: each reply another provider wrote with its
    own content parts, as text and tool calls (see the module's docstring)."""
    return [_neutral(message) if _foreign(message, provider) else message for message in messages]


def _foreign(message: AnyMessage, provider: str | None) -> bool:
    if not isinstance(message, AIMessage) or not isinstance(message.content, list):
        return False
    written_by = message.response_metadata.get("model_provider")
    return written_by is not None and written_by != provider


def _neutral(message: AIMessage) -> AIMessage:
    calls = {call.get("id") for call in [*message.tool_calls, *message.invalid_tool_calls]}
    written_by = message.response_metadata.get("model_provider")
    texts: list[str] = []
    for part in message.content:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict):
            continue
        elif part.get("type") == "text":
            texts.append(str(part.get("text") or ""))
        elif part.get("type") == "tool_use" and part.get("id") in calls:
            continue  # sent as the message's tool call
        elif part.get("type") == "tool_use":
            args = json.dumps(part.get("input") or {}, ensure_ascii=False, default=str)
            texts.append(f"\n[called {part.get('name')} {args}, as {written_by} wrote it]\n")
        else:
            kind = part.get("type") or "unknown"
            texts.append(f"\n[a {kind} part written by {written_by}, not carried over]\n")
    return message.model_copy(update={"content": "".join(texts).strip()})
