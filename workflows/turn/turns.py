"""The turn engine: from a message or a set of decisions to the point where the turn
rests (a reply, calls pending, or a failure). Workflow side (deterministic; side
effects only through activities, by name: ``call_model``, ``canonical_args``, ``run_tool``).

A pending call runs only inside :meth:`TurnEngine.run` for the ``decide`` that names it
(F1), and every tool runs through one path, ``execution.ToolRunner``, before and after
a decision (F3). Whatever happens, every call of the transcript ends answered
(through the ledger) or pending, and the status is never left ``running``.

Canonical once: a proposed call's arguments arrive canonical from ``call_model``; an
edit's are made canonical by ``canonical_args`` before anything else. Either way
``triage`` judges exactly the arguments that run, and ``run_tool`` gets them with
their digest, which the worker checks. An edit is a new proposal: a rule that denies
it refuses the decision; one that needs a reviewer leaves the call waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from langchain_core.messages import AIMessage
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from parley.contracts import (
    CallModelInput,
    DecideInput,
    InverseCall,
    PendingCall,
    RevertInput,
    ToolCall,
    TurnResult,
    Usage,
    text_of,
)
from parley.contracts.errors import ErrorType
from parley.workflows.context import Records, View
from parley.workflows.record import metrics
from parley.workflows.record.publishing import set_status
from parley.workflows.rules.gate import run_id_for
from parley.workflows.rules.triage import Verdict
from parley.workflows.turn.busy import Busy
from parley.workflows.turn.decisions import Decisions
from parley.workflows.turn.execution import TurnFailed
from parley.workflows.turn.failover import ModelFailover
from parley.workflows.turn.front_end import ClientRequest, FrontEnd
from parley.workflows.turn.instructions import Instructions
from parley.workflows.turn.model_calls import ModelCaller
from parley.workflows.turn.notifying import Notifier
from parley.workflows.turn.proposals import Proposals
from parley.workflows.turn.reverts import Reverts
from parley.workflows.turn.spending import SpendGate
from parley.workflows.turn.streaming import ReplyStream
from parley.workflows.turn.subagents import Subagents
from parley.workflows.turn.usage import UsageMeter

#: The patch under which a decision on some of the pending calls leaves the webhook's
#: announcement of the others going; histories recorded before it cancelled it.
PARTIAL_DECISIONS_KEEP_NOTICES = "partial-decisions-keep-notices"


class TurnJobs(NamedTuple):
    """The jobs a turn runs through, each built once by ``ConversationWorkflow``."""

    front_end: FrontEnd
    busy: Busy
    usage: UsageMeter
    failover: ModelFailover
    model: ModelCaller
    stream: ReplyStream
    instructions: Instructions
    notifier: Notifier
    subagents: Subagents
    spend: SpendGate
    decisions: Decisions
    reverts: Reverts
    proposals: Proposals


class TurnEngine:
    """The one writer of ``ConversationState.tools`` (the worker's catalogue as of the
    latest model call) and of the turn's running flag; the rest it reads, or changes
    through its writer (``Records``, the jobs)."""

    def __init__(self, view: View, records: Records, jobs: TurnJobs) -> None:
        self._view, self._state, self._start = view, view.state, view.start
        self._records, self._ledger, self._jobs = records, records.ledger, jobs

    async def run(
        self,
        *,
        decisions: DecideInput | None = None,
        expired: list[PendingCall] | None = None,
        subagent_news: bool = False,
        client: ClientRequest | None = None,
        opening: Callable[[], None] | None = None,
        revert: RevertInput | None = None,
    ) -> TurnResult:
        """Run until the turn rests; the running flag is set for exactly that long
        (:meth:`_turn`). Edits that the rules refuse raise ``InvalidDecision`` before
        anything is applied. ``client`` (else ``decisions``) names the run and gives it the
        front end's context and tools; ``opening`` adds the turn's message once the run
        has started."""
        state = self._state
        with self._turn():
            edits = (
                await self._jobs.decisions.review_edits(decisions) if decisions is not None else {}
            )
            if decisions is not None:
                await self._jobs.decisions.review_previews(decisions)
            inverse = await self._jobs.reverts.inverse_of(revert) if revert else None
            state.runs += 1
            client = client or decisions
            run_id = run_id_for(state, client.run_id if client else None)
            self._jobs.front_end.begin_turn(client)
            self._ledger.begin_turn()
            self._jobs.usage.begin_turn()
            self._jobs.failover.begin_turn()
            pending_before = {call.tool_call_id for call in state.pending}
            if expired or (decisions is not None and self._answers_every_call(decisions)):
                self._jobs.notifier.cancel_all()  # the calls it announced are being answered
            self._records.events.run_started(run_id)
            if opening is not None:
                opening()
            set_status(state, "running")
            reverting = (revert, inverse) if revert and inverse else None
            result = await self._rest(decisions, edits, expired or [], subagent_news, reverting)
        result.usage = self._jobs.usage.turn
        result.notice = self._jobs.failover.notice
        if result.status != "failed":  # a failed run announced it before its RUN_ERROR
            self._jobs.usage.announce()
        if result.status == "awaiting_approval":
            self._records.events.run_finished(run_id, state.pending, self._view.catalogue())
            set_status(state, "awaiting_approval")
            if new_pending := {c.tool_call_id for c in state.pending} - pending_before:
                metrics.approvals_requested(len(new_pending))
                self._jobs.notifier.announce(run_id)
        elif result.status == "completed":
            self._records.events.run_finished(run_id, [], self._view.catalogue())
            set_status(state, "idle")
        else:
            set_status(state, "failed")
        self._ledger.rest(result)
        self._jobs.busy.answered(result)
        self._ledger.trim()
        if self._start.subagent is not None and result.status == "awaiting_approval":
            await self._jobs.subagents.report_to_parent(result.results)
        return result

    def _answers_every_call(self, decisions: DecideInput) -> bool:
        """Whether a decision names every pending call; one that names some leaves the
        announcement of the others going (recorded before that: it always stopped)."""
        named = {d.tool_call_id for d in decisions.decisions}
        if named >= {call.tool_call_id for call in self._state.pending}:
            return True
        return not workflow.patched(PARTIAL_DECISIONS_KEEP_NOTICES)

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """The one place a turn's running flag is set and cleared, whatever happens:
        validators refuse messages and decisions while it is set."""
        self._state.turn_running = True
        try:
            yield
        finally:
            self._state.turn_running = False

    async def _rest(
        self,
        decisions: DecideInput | None,
        edits: dict[str, tuple[ToolCall, Verdict]],
        expired: list[PendingCall],
        subagent_news: bool,
        revert: tuple[RevertInput, InverseCall] | None = None,
    ) -> TurnResult:
        """Apply what the turn was started with, then call the model until it rests; a
        failure fails the turn closed (nothing else runs, subagents are stopped)."""
        try:
            if revert is not None:  # Parley proposes the inverse; the gate sorts it
                request, inverse = revert
                ai = self._jobs.reverts.propose(request, inverse)
                self._records.transcript.add_proposal(ai)
                reverts = {"reverts": request.tool_call_id}
                await self._jobs.proposals.handle(ai, proposer=request.user_id, detail=reverts)
            if decisions is not None:
                await self._jobs.decisions.apply(decisions, edits)
            for call in expired:
                if not self._jobs.spend.expired(call):
                    self._ledger.answer_timed_out(call, self._start.pending_expiry_seconds)
            if subagent_news:
                self._jobs.subagents.apply_news()
            if self._state.pending:
                return self._ledger.turn_result("awaiting_approval")
            if self._jobs.front_end.waiting:  # the client's results come with its next run
                return self._ledger.turn_result("completed")
            if declined := self._jobs.spend.take_declined():
                return self._ledger.turn_result("completed", reply=declined)
            return await self._model_loop(check_catalogue=decisions is None)
        except TurnFailed as failure:
            self._jobs.subagents.stop("the turn that started it failed")
            return self._fail(failure)
        except Exception as err:  # a bug must not leave the turn "running" for ever
            workflow.logger.exception("turn failed unexpectedly")
            self._records.pending.abandon()
            self._jobs.subagents.stop("the turn that started it failed")
            return self._fail(
                TurnFailed(f"internal error: {type(err).__name__}: {err}", "InternalError")
            )

    def _fail(self, failure: TurnFailed) -> TurnResult:
        self._jobs.usage.announce()
        self._records.events.run_error(failure.message, failure.code)
        self._ledger.audit("turn_failed", "parley", detail={"error": failure.message})
        return self._ledger.turn_result("failed", error=failure.message)

    # --- the model ----------------------------------------------------------------------

    async def _model_loop(self, *, check_catalogue: bool) -> TurnResult:
        """Call the model until it answers in text or proposes calls that wait for a
        decision. A turn that a message starts checks the worker's tool catalogue on its
        first call (a deploy in between is seen at the next message)."""
        for call_number in range(self._start.max_model_calls_per_turn):
            if self._jobs.spend.must_ask():
                return self._ledger.turn_result("awaiting_approval")
            ai = await self._jobs.busy.call_model(
                self._call_model, check_catalogue and not call_number
            )
            if not ai.tool_calls and not ai.invalid_tool_calls:
                return self._ledger.turn_result("completed", reply=text_of(ai))
            await self._jobs.proposals.handle(ai)
            if self._state.pending:
                return self._ledger.turn_result("awaiting_approval", reply=text_of(ai) or None)
            if self._jobs.front_end.waiting:
                return self._ledger.turn_result("completed", reply=text_of(ai) or None)
        raise TurnFailed(
            f"the model was called {self._start.max_model_calls_per_turn} times in this "
            "turn without coming to an answer; the turn was stopped. Send a new message "
            "to go on.",
            ErrorType.MODEL_CALL_LIMIT,
        )

    async def _call_model(self, *, check_catalogue: bool) -> AIMessage:
        """One model call. Its input holds only the messages added since the previous
        call; the rest of the transcript travels as the stored chain's reference. With
        ``check_catalogue`` the worker sends its tool catalogue if the workflow's is not
        the same (or there is none yet)."""
        state = self._state
        self._records.tally.model_call()
        new_messages = self._records.transcript.unsent()
        known = (state.tools.version if state.tools else "") if check_catalogue else None
        self._jobs.stream.begin()
        try:
            output = await self._jobs.model.call(
                CallModelInput(
                    context=state.transcript.model_context,
                    new_messages=new_messages,
                    catalogue_version=known,
                    subagent=self._start.subagent.name if self._start.subagent else None,
                    client_context=self._jobs.front_end.context,
                    client_tools=[] if self._start.subagent else self._jobs.front_end.offered,
                    rewinds=state.counters.rewinds,
                    **self._jobs.instructions.call_fields(),
                )
            )
        except ActivityError as err:
            self._jobs.stream.fail()
            cause = err.cause
            if (billed := Usage.of_failure(cause)) is not None:
                self._jobs.usage.add_usage(billed)
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            code = (cause.type if isinstance(cause, ApplicationError) else None) or "model"
            raise TurnFailed(f"the model call failed: {message}", code) from err
        ai = output.message
        assert ai is not None  # ModelCaller returns replies only
        self._jobs.instructions.take(output.instructions)
        self._jobs.usage.add_usage(Usage.of_call(ai).under(output.model))  # per model, if several
        if output.catalogue is not None:
            state.tools = output.catalogue
        self._records.transcript.add_reply(ai, output.context)
        self._jobs.stream.finish(ai, ai.id or f"msg-{state.transcript.length}")
        return ai
