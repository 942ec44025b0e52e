"""Model calls within a bounded context. Workflow side (deterministic; side effects
only through the ``call_model`` and ``compact_context`` activities).

``call_model`` says when the model's view of the conversation would pass the worker's
context budget: it then does not call the model and returns ``over_budget``. A
provider may still refuse a request as too long (``ContextLengthExceeded``). Either
way the conversation is compacted by ``compact_context`` (its own activity: retried,
recorded, seen in the Temporal UI), recorded in the audit log (``compacted``) and the
event log (``CUSTOM parley.compacted``), and the model is called again; a refusal
after a compaction compacts harder once. What still does not fit fails the turn with
one line naming the budget; the conversation goes on. Neither activity starts once the
run's history nears Temporal's limits (``execution.check_history_room``). Each names the
model the workflow chose (``parley.workflows.turn.failover``); one that fails for good with a
failover offer is made again on the next listed model.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        CALL_MODEL,
        COMPACT_CONTEXT,
        CallModelInput,
        CallModelOutput,
        CompactContextInput,
        ContextRef,
        Usage,
    )
    from parley.contracts.activity_config import MODEL_ACTIVITY, model_summary
    from parley.contracts.errors import ErrorType
    from parley.contracts.instructions import system_text
    from parley.workflows.record.events import EventLog
    from parley.workflows.record.ledger import Ledger
    from parley.workflows.turn.execution import TurnFailed, check_history_room
    from parley.workflows.turn.failover import ModelFailover
    from parley.workflows.turn.usage import UsageMeter

#: Compactions one model call may run: a first, and a harder one after a refusal.
COMPACTIONS_PER_CALL = 2


class ModelCaller:
    def __init__(
        self,
        ledger: Ledger,
        events: EventLog,
        usage: UsageMeter,
        failover: ModelFailover | None = None,
    ) -> None:
        self._ledger = ledger
        self._events = events
        self._usage = usage
        self._failover = failover
        self._model: str | None = None  # this call's model (``failover``)
        self._tried: set[str] = set()

    async def call(self, request: CallModelInput) -> CallModelOutput:
        """The model's reply (``message`` set), compacting on the way when needed, on
        the next listed model when one fails for good (``parley.workflows.turn.failover``)."""
        compactions = 0
        self._model = self._failover.current() if self._failover else None
        self._tried = set()
        while True:
            check_history_room("the next model call")
            try:
                output = await self._call_model(request)
            except ActivityError as err:
                if not _too_long(err) or compactions >= COMPACTIONS_PER_CALL:
                    raise
                refusal: ActivityError | None = err
                context, new, harder = request.context, request.new_messages, True
            else:
                if output.message is not None:
                    return output
                if compactions >= COMPACTIONS_PER_CALL:
                    raise TurnFailed(
                        f"the conversation is still {output.over_budget} tokens over the "
                        "model's context budget after compacting it; send a shorter "
                        "message, or raise PARLEY_MODEL_CONTEXT_TOKENS",
                        ErrorType.CONTEXT_LENGTH_EXCEEDED,
                    )
                refusal, context, new, harder = None, output.context, [], compactions > 0
                if (asked := output.instructions) is not None:  # for the summary to count
                    text = system_text(asked.instructions, request.added_instructions)
                    request = request.model_copy(update={"instructions": text})
            check_history_room("the conversation was compacted")
            try:
                compacted = await self._compact(
                    CompactContextInput(
                        context=context,
                        new_messages=new,
                        harder=harder,
                        instructions=request.instructions,
                    )
                )
            except ActivityError as err:
                if refusal is not None and _too_long(err):
                    # Nothing left to compact: the provider's own refusal says it best.
                    # (Raised as is: ``from`` would replace the failure it carries.)
                    raise refusal  # noqa: B904
                raise
            compactions += 1
            request = request.model_copy(update={"context": compacted, "new_messages": []})

    async def _call_model(self, request: CallModelInput) -> CallModelOutput:
        while True:
            try:
                return await self._call_model_on(request.model_copy(update={"model": self._model}))
            except ActivityError as err:
                self._fail_over(err)

    def _fail_over(self, err: ActivityError) -> None:
        """Raise ``err`` again unless the call moves to another model (then counted
        what the failed one's provider reported)."""
        following = self._failover.fail_over(err, self._tried) if self._failover else None
        if self._failover is None or following is None:
            raise err
        if (billed := Usage.of_failure(err.cause)) is not None:
            self._usage.add_usage(billed)
        self._model = following
        check_history_room("the call on the next model")

    async def _call_model_on(self, request: CallModelInput) -> CallModelOutput:
        return await workflow.execute_activity(
            CALL_MODEL,
            request,
            result_type=CallModelOutput,
            **MODEL_ACTIVITY.options(summary=model_summary(request.model, request.subagent)),
        )

    async def _compact(self, request: CompactContextInput) -> ContextRef:
        while True:
            try:
                context: ContextRef = await workflow.execute_activity(
                    COMPACT_CONTEXT,
                    request.model_copy(update={"model": self._model}),
                    result_type=ContextRef,
                    **MODEL_ACTIVITY.options(summary=model_summary(self._model, compact=True)),
                )
                break
            except ActivityError as err:
                self._fail_over(err)
        compaction = context.compaction
        assert compaction is not None
        if compaction.usage is not None:
            self._usage.add_usage(compaction.usage)
        detail = {
            "covers": compaction.covers,
            "tokens_before": compaction.tokens_before,
            "tokens_after": compaction.tokens_after,
            "harder": request.harder,
        }
        self._ledger.audit("compacted", "parley", detail=detail)
        self._events.compacted(detail)
        return context


def _too_long(err: ActivityError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == ErrorType.CONTEXT_LENGTH_EXCEEDED
