"""The ``call_model`` activity: one chat-model call for a conversation. Activity side.

Input → output, bounded whatever the conversation's length: the workflow sends the
messages added since its previous model call and a reference to the stored transcript
(``parley.storage.TranscriptStore``); the activity rebuilds the whole transcript from
the chain (cached in memory), calls the model, stores the new messages and the reply as
one more segment and returns the reply with the new reference. The reply is read as a
stream (``astream``) and its text sent to the workflow as it grows (``streaming``),
under the message id this attempt gives the reply: a retried attempt streams under a new
id. What one call may return is bounded (``reply_limits``: its size in bytes, read as it
streams, and the tool calls it proposes); past that it fails as a model error, never
retried. The tool catalogue comes back only when the workflow's copy is out of date. Provider
SDK retries are off; failures are classified once
(``parley.activities.models.failures``) into the retry contract: transient ones are
retried by Temporal (``Retry-After`` honoured), refusals fail the turn. A subagent's
conversation is offered only the tools that subagent may use, as this worker defines it.

Each proposed call leaves here canonical (``ParleyTool.canonical_args``): the workflow's
rules, the approval card, the audit log and the tool see exactly those arguments. A call
whose arguments the tool cannot take becomes an invalid tool call carrying the reason,
which the model reads; nobody is asked to approve it. Ids are Parley's: an assistant
message id no client can have chosen, and call ids unique in the conversation and its
subagents (a subagent's carry its ``<name>-<n>``, a top-level conversation's never do).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    message_chunk_to_message,
)
from langchain_core.messages.ai import add_usage
from temporalio import activity
from temporalio.exceptions import ApplicationError

from parley.activities.call_ids import _with_unique_ids
from parley.activities.compaction import (
    DEFAULT_CONTEXT_TOKENS,
    CompactionActivities,
    ContextBudget,
    model_view,
    with_client_context,
)
from parley.activities.heartbeat import heartbeating
from parley.activities.instructions import system_message
from parley.activities.models.failover import (
    ListedModels,
    carried_over,
    fails_over,
    provider_of,
)
from parley.activities.models.failures import classify_model_error, model_error_type
from parley.activities.redaction import redact
from parley.activities.reply_limits import ReplyLimits, ReplyMeter, check_reply, merged
from parley.activities.streaming import ReplyStreamer, Send
from parley.contracts import (
    ASSISTANT_MESSAGE_PREFIX,
    CALL_MODEL,
    STREAM_DELTA_SIGNAL,
    WORKFLOW_ID_PREFIX,
    CallModelInput,
    CallModelOutput,
    ClientTool,
    subagent_tag,
    text_of,
)
from parley.contracts.activity_config import MODEL_ACTIVITY, retry_delay
from parley.contracts.errors import (
    OVERLOAD_CODES_DEFAULT,
    ErrorType,
    ModelRequestError,
    ToolInputError,
    TransientError,
)
from parley.contracts.failover import FailoverOffer
from parley.contracts.instructions import WorkerInstructions
from parley.contracts.limits import clipped
from parley.observability import tracing
from parley.storage import TranscriptStore
from parley.tools import ToolRegistry, UnstableCanonicalForm


class ModelActivities:
    def __init__(
        self,
        model: BaseChatModel | ListedModels,
        registry: ToolRegistry,
        transcripts: TranscriptStore,
        *,
        overload_codes: frozenset[str] = OVERLOAD_CODES_DEFAULT,
        notifications: bool = False,
        context_budget: ContextBudget | None = None,
        reply_limits: ReplyLimits | None = None,
    ) -> None:
        self._overload_codes = overload_codes
        self._reply_limits = reply_limits or ReplyLimits()
        #: No budget given: only a provider's "context length exceeded" compacts.
        self._budgeted = context_budget is not None
        #: PARLEY_MODEL's models in order (one, most often): each call names its own.
        self._listed = listed = ListedModels.of(model)
        self.compaction = CompactionActivities(
            listed,
            transcripts,
            context_budget or ContextBudget(DEFAULT_CONTEXT_TOKENS),
            lambda exc, index: _model_failure(exc, overload_codes, offer=listed.offer(index)),
        )
        self._registry = registry
        self._catalogue = registry.catalogue(notifications=notifications)
        self._transcripts = transcripts
        self._choices = [self._choice(each) for each in listed.models]

    def _choice(self, model: BaseChatModel) -> _Choice:
        tools, registry = self._registry.langchain_tools(), self._registry
        subagents = {s.name: _bound(model, registry.langchain_tools(s)) for s in registry.subagents}
        return _Choice(
            model, model_name(model), provider_of(model), _bound(model, tools), subagents
        )

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, request: CallModelInput) -> CallModelOutput:
        async with heartbeating():
            index = self._listed.index_of(request.model)  # the workflow's choice
            choice = self._choices[index]
            model = self._model_for(choice, request.subagent, request.client_tools)
            history = await self._transcripts.load(request.context)
            messages = history + list(request.new_messages)
            compaction = request.context.compaction if request.context else None
            system, asked = system_message(request, self._registry.agent)  # the instructions
            view = model_view(messages, compaction, system)
            view = with_client_context(view, request.client_context)
            view = carried_over(view, choice.provider)  # another provider's parts converted
            if self._budgeted and (over := self.compaction.over_budget(view)):
                return await self._over_budget(request, over, asked)
            message_id = f"{ASSISTANT_MESSAGE_PREFIX}{uuid.uuid4().hex[:12]}"
            session_id = activity.info().workflow_id.removeprefix(WORKFLOW_ID_PREFIX)
            with tracing.model_span(choice.name, session_id) as span:
                try:
                    reply = await _streamed_reply(
                        model, view, _signaller(), message_id, self._reply_limits
                    )
                except Exception as exc:
                    # Not chained: the SDK exception text may echo the request and its
                    # key, and a chained cause would be stored in workflow history.
                    usage = getattr(exc, REPORTED_USAGE, None)
                    offer, name = self._listed.offer(index), self._listed.name(index)
                    raise _model_failure(exc, self._overload_codes, usage, offer, name) from None
                tracing.record_usage(span, getattr(reply, "usage_metadata", None))
            if not isinstance(reply, AIMessage):
                raise ApplicationError(
                    f"the model returned {type(reply).__name__}, not an AIMessage",
                    type=ErrorType.MODEL_FAILED,
                    non_retryable=True,
                )
            used = {
                call["id"]
                for message in messages
                if isinstance(message, AIMessage)
                for call in message.tool_calls
            }
            tag = subagent_tag(activity.info().workflow_id)
            reply = self._canonical(
                _with_unique_ids(reply, message_id, len(messages), used, tag, request.rewinds)
            )
            context = await self._transcripts.append(
                request.context,
                [*request.new_messages, reply],
                workflow_id=activity.info().workflow_id,
                namespace=activity.info().namespace,
            )
        fresh = (
            request.catalogue_version is not None
            and request.catalogue_version != self._catalogue.version
        )
        return CallModelOutput(
            message=reply,
            context=context,
            catalogue=self._catalogue if fresh else None,
            instructions=asked,
            model=self._listed.name(index),
        )

    async def _over_budget(
        self, request: CallModelInput, over: int, asked: WorkerInstructions | None
    ) -> CallModelOutput:
        """The model is not called: the new messages are stored, and the workflow is
        told to compact (``compact_context``) and call again."""
        info = activity.info()
        context = request.context
        if request.new_messages or context is None:
            context = await self._transcripts.append(
                context,
                list(request.new_messages),
                workflow_id=info.workflow_id,
                namespace=info.namespace,
            )
        return CallModelOutput(context=context, over_budget=over, instructions=asked)

    def _model_for(
        self, choice: _Choice, subagent: str | None, client_tools: list[ClientTool]
    ) -> Any:
        if client_tools and subagent is None:  # the front end's own, for this turn
            return _bound(choice.unbound, self._with_client_tools(client_tools))
        if subagent is None:
            return choice.bound
        model = choice.subagents.get(subagent)
        if model is None:
            raise ApplicationError(
                f"this worker has no subagent {subagent!r} (PARLEY_POLICIES); its "
                "conversation cannot go on",
                type=ErrorType.MODEL_REQUEST,
                non_retryable=True,
            )
        return model

    def _with_client_tools(self, client_tools: list[ClientTool]) -> list[Any]:
        """The worker's tools and the front end's; a front-end tool named like one of
        the worker's (or a subagent) fails the turn: its call would skip the gate."""
        taken = sorted(
            {tool.name for tool in client_tools} & {spec.name for spec in self._catalogue.tools}
        )
        if taken:
            raise ApplicationError(
                f"front-end tool {', '.join(taken)} has the name of one of this worker's "
                "tools; name the front end's tools apart",
                type=ErrorType.MODEL_REQUEST,
                non_retryable=True,
            )
        return [*self._registry.langchain_tools(), *(t.as_openai_tool() for t in client_tools)]

    def _canonical(self, reply: AIMessage) -> AIMessage:
        """Each proposed call with its arguments in the tool's canonical form; a call the
        tool cannot take becomes an invalid call saying why. Calls of tools this worker
        does not have (and of subagents) are left to the workflow's catalogue check."""
        calls, invalid = [], list(reply.invalid_tool_calls)
        for call in reply.tool_calls:
            tool = self._registry.get(call["name"])
            if tool is None:
                calls.append(call)
                continue
            try:
                calls.append({**call, "args": tool.canonical_args(dict(call["args"]))})
            except (ToolInputError, UnstableCanonicalForm) as err:
                invalid.append(
                    {
                        "type": "invalid_tool_call",
                        "id": call["id"],
                        "name": call["name"],
                        "args": json.dumps(call["args"], ensure_ascii=False, default=str),
                        "error": str(err),
                    }
                )
        return reply.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


async def _streamed_reply(
    model: Any,
    messages: list[Any],
    send: Send | None,
    message_id: str,
    limits: ReplyLimits | None = None,
) -> BaseMessage:
    """The model's reply, read from its stream (``astream``; a model that cannot stream
    gives its whole reply as one piece). Its text goes to the workflow as it grows. A
    reply past ``limits`` raises ``ModelReplyTooLarge``; a stream stops being read (and
    is closed) as soon as it passes the size bound."""
    limits = limits or ReplyLimits()
    if send is None:
        whole: BaseMessage = await model.ainvoke(messages)
        with _reporting_usage([whole]):
            check_reply(whole, limits)
        return whole
    meter = ReplyMeter(limits)
    pieces: list[Any] = []
    with _reporting_usage(pieces):
        async with ReplyStreamer(send, message_id) as streamer:
            stream: AsyncIterator[Any] = model.astream(messages)
            try:
                async for chunk in stream:
                    pieces.append(chunk)
                    meter.add(chunk)
                    streamer.append(text_of(chunk))
            finally:
                if (close := getattr(stream, "aclose", None)) is not None:
                    await close()  # the provider's connection, at once
        if not pieces:
            raise ModelRequestError("the model's stream ended without a reply")
        reply = merged(pieces)
        check_reply(reply, limits)
    if not isinstance(reply, AIMessageChunk):
        return reply
    return _strict_arguments(message_chunk_to_message(reply), reply.tool_call_chunks)


#: The attribute a failed call's exception carries the usage its provider reported on.
REPORTED_USAGE = "parley_reported_usage"


@contextmanager
def _reporting_usage(pieces: list[Any]) -> Iterator[None]:
    """A call that fails after its provider reported usage (a reply refused as too
    large, a stream cut after its usage piece) keeps that usage on its exception: the
    tokens were billed, and the workflow counts them (``Usage.of_failure``)."""
    try:
        yield
    except Exception as exc:
        reported = [p.usage_metadata for p in pieces if getattr(p, "usage_metadata", None)]
        if reported:
            total = reported[0]
            for more in reported[1:]:
                total = add_usage(total, more)
            setattr(exc, REPORTED_USAGE, dict(total))
        raise


def _strict_arguments(message: Any, chunks: list[Any]) -> Any:
    """A streamed reply's calls as a whole reply would have them. LangChain parses
    streamed arguments leniently (``parse_partial_json`` closes what was cut off), so
    arguments truncated by the provider would become a valid call with less in it:
    each call's raw arguments are parsed strictly, and one that is not a JSON object
    becomes an invalid call that the model is told about, as in a whole reply."""
    raw_by_id = {chunk.get("id"): chunk.get("args") or "" for chunk in chunks}
    calls, invalid = [], list(message.invalid_tool_calls)
    for call in message.tool_calls:
        raw = raw_by_id.get(call["id"], "")
        try:
            parsed = json.loads(raw) if raw.strip() else {}
            error = None if isinstance(parsed, dict) else "the arguments are not a JSON object"
        except ValueError as err:
            error = f"the arguments are not valid JSON: {err}"
        if error is None:
            calls.append(call)
        else:
            invalid.append(
                {
                    "type": "invalid_tool_call",
                    "id": call["id"],
                    "name": call["name"],
                    "args": raw,
                    "error": error,
                }
            )
    return message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def model_name(model: BaseChatModel) -> str:
    """The model's name as its provider knows it (``gpt-4o-mini``), else its kind."""
    for attribute in ("model_name", "model"):
        if isinstance(name := getattr(model, attribute, None), str) and name:
            return name
    return getattr(model, "_llm_type", type(model).__name__)


def _signaller() -> Send | None:
    """Sends a stream batch to the calling workflow's run (None outside a worker)."""
    try:
        client = activity.client()
    except RuntimeError:
        return None
    info = activity.info()
    handle = client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    return lambda delta: handle.signal(STREAM_DELTA_SIGNAL, delta)


@dataclass(frozen=True)
class _Choice:
    """One of the worker's models, bound to its tools and to each subagent's."""

    unbound: BaseChatModel
    name: str
    provider: str | None
    bound: Any
    subagents: dict[str, Any]


def _bound(model: BaseChatModel, tools: list[Any]) -> Any:
    return model.bind_tools(tools) if tools else model


def _model_failure(
    exc: Exception,
    overload_codes: frozenset[str] = OVERLOAD_CODES_DEFAULT,
    usage: dict[str, Any] | None = None,
    offer: FailoverOffer | None = None,
    model: str | None = None,
) -> ApplicationError:
    """The one mapping from a failed model call to the retry contract, redacted. The
    usage its provider reported, if any, travels as the failure's details, and so does
    the next model (``offer``) when the worker lists several and the failure fails over
    (and the usage's ``model``, counted under it)."""
    billed = {"usage_metadata": usage, **({"model": model} if model else {})}
    details: tuple[dict[str, Any], ...] = (billed,) if usage else ()
    classified = classify_model_error(exc, overload_codes=overload_codes)  # ParleyError: as is
    if offer is not None and fails_over(classified):
        details = (*details, offer.detail())
    if isinstance(classified, TransientError):
        return ApplicationError(
            clipped(redact(classified.message)),
            *details,
            type=ErrorType.MODEL_TRANSIENT,
            next_retry_delay=retry_delay(classified.retry_after, MODEL_ACTIVITY),
        )
    if classified is not None:
        return ApplicationError(
            clipped(redact(classified.message)),
            *details,
            type=model_error_type(classified),
            non_retryable=True,
        )
    return ApplicationError(
        clipped(redact(f"the model call failed: {type(exc).__name__}: {exc}")),
        *details,
        type=ErrorType.MODEL_FAILED,
        non_retryable=True,
    )
