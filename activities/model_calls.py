"""The ``call_model`` activity: one chat-model call for a conversation. Activity side.

Input → output, bounded whatever the conversation's length: the workflow sends the
messages added since its previous model call and a reference to the stored transcript
(``parley.storage.TranscriptStore``); the activity rebuilds the whole transcript from the
chain (cached in memory), calls the model, stores the new messages and the reply as one
more segment and returns the reply with the new reference. The tool catalogue comes
back only when the workflow's copy is out of date. Provider SDK retries are off; failures
are classified once (``parley.activities.models.failures``) into the retry contract: transient ones
are retried by Temporal (``Retry-After`` honoured), refusals fail the turn. A subagent's
conversation is offered only the tools that subagent may use, as this worker defines it.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from parley.activities.heartbeat import heartbeating
from parley.activities.models.failures import classify_model_error
from parley.activities.redaction import redact
from temporalio import activity
from temporalio.exceptions import ApplicationError

from parley.contracts import CALL_MODEL, CallModelInput, CallModelOutput
from parley.errors import ErrorType, TransientError
from parley.settings import DEFAULT_OVERLOAD_CODES, MODEL_ACTIVITY, retry_delay
from parley.storage import TranscriptStore
from parley.tools import ToolRegistry


class ModelActivities:
    def __init__(
        self,
        model: BaseChatModel,
        registry: ToolRegistry,
        transcripts: TranscriptStore,
        *,
        overload_codes: frozenset[str] = DEFAULT_OVERLOAD_CODES,
        notifications: bool = False,
    ) -> None:
        self._overload_codes = overload_codes
        self._registry = registry
        self._catalogue = registry.catalogue(notifications=notifications)
        self._transcripts = transcripts
        self._model = _bound(model, registry.langchain_tools())
        self._subagent_models = {
            spec.name: _bound(model, registry.langchain_tools(spec)) for spec in registry.subagents
        }

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, request: CallModelInput) -> CallModelOutput:
        async with heartbeating():
            model = self._model_for(request.subagent)
            history = await self._transcripts.load(request.context)
            messages = history + list(request.new_messages)
            try:
                reply = await model.ainvoke(messages)
            except Exception as exc:
                # Not chained: the SDK exception text may echo the request and its key,
                # and a chained cause would be stored in workflow history.
                raise _model_failure(exc, self._overload_codes) from None
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
            reply = self._prepared(_with_unique_ids(reply, len(messages), used))
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
            message=reply, context=context, catalogue=self._catalogue if fresh else None
        )

    def _model_for(self, subagent: str | None) -> Any:
        if subagent is None:
            return self._model
        model = self._subagent_models.get(subagent)
        if model is None:
            raise ApplicationError(
                f"this worker has no subagent {subagent!r} (PARLEY_POLICIES); its "
                "conversation cannot go on",
                type=ErrorType.MODEL_REQUEST,
                non_retryable=True,
            )
        return model

    def _prepared(self, reply: AIMessage) -> AIMessage:
        """Apply each tool's ``prepare`` to the proposed args. One that cannot be prepared
        stays as the model wrote it: validation or the tool itself will say why."""
        calls = []
        for call in reply.tool_calls:
            tool = self._registry.get(call["name"])
            if tool is not None and tool.prepare is not None:
                try:
                    call = {**call, "args": tool.prepare(dict(call["args"]))}
                except Exception:
                    activity.logger.info("could not prepare args of %s", call["name"])
            calls.append(call)
        return reply.model_copy(update={"tool_calls": calls})


def _bound(model: BaseChatModel, tools: list[Any]) -> Any:
    return model.bind_tools(tools) if tools else model


def _with_unique_ids(reply: AIMessage, transcript_length: int, used: set[str]) -> AIMessage:
    """Give the message and every tool call (valid or not) an id unique in the
    conversation. Some providers omit ids, some (Ollama, vLLM) restart at ``call_0``
    every turn; the confirmation gate and the idempotency key
    ``<workflow_id>:<tool_call_id>`` address calls by id, so a reused id would mix up
    two calls."""
    base = f"m{transcript_length}"
    # LangChain names a message it got without an id "lc_run--<uuid>"; that says
    # nothing and costs history bytes on every turn, so such a message gets ``base``.
    message_id = reply.id if reply.id and not reply.id.startswith("lc_run-") else base
    counter = iter(range(len(reply.tool_calls) + len(reply.invalid_tool_calls)))

    def unique(call: Any) -> Any:
        call_id = call.get("id")
        index = next(counter)
        if not call_id or call_id in used:
            call_id = f"call_{base}_{index}"
        used.add(call_id)
        return {**call, "id": call_id}

    return reply.model_copy(
        update={
            "id": message_id,
            "tool_calls": [unique(c) for c in reply.tool_calls],
            "invalid_tool_calls": [unique(c) for c in reply.invalid_tool_calls],
        }
    )


def _model_failure(
    exc: Exception, overload_codes: frozenset[str] = DEFAULT_OVERLOAD_CODES
) -> ApplicationError:
    """The one mapping from a failed model call to the retry contract, redacted."""
    classified = classify_model_error(exc, overload_codes=overload_codes)  # ParleyError: as is
    if isinstance(classified, TransientError):
        return ApplicationError(
            redact(classified.message),
            type=ErrorType.MODEL_TRANSIENT,
            next_retry_delay=retry_delay(classified.retry_after, MODEL_ACTIVITY),
        )
    if classified is not None:
        return ApplicationError(
            redact(classified.message), type=ErrorType.MODEL_REQUEST, non_retryable=True
        )
    return ApplicationError(
        redact(f"the model call failed: {type(exc).__name__}: {exc}"),
        type=ErrorType.MODEL_FAILED,
        non_retryable=True,
    )
