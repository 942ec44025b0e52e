"""The turn engine: from a message or a set of decisions to the point where the turn
rests (a reply, calls pending, or a failure). Workflow side (deterministic; side
effects only through activities, by name: ``call_model``, ``canonical_args``, ``run_tool``).

A pending call runs only inside :meth:`TurnEngine.run` for the ``decide`` that names it
(F1), and every tool runs through one path, :meth:`TurnEngine._execute`, before and
after a decision (F3). Whatever happens, every call of the transcript ends answered
(through the ledger) or pending, and the status is never left ``running``.

Canonical once: a proposed call's arguments arrive canonical from ``call_model``; an
edit's are made canonical by ``canonical_args`` before anything else. Either way
``triage`` judges exactly the arguments that run, and ``run_tool`` gets them with
their digest, which the worker checks. An edit is a new proposal: a rule that denies
it refuses the decision; one that needs a reviewer leaves the call waiting.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage
from parley.workflows import metrics
from parley.workflows.events import EventLog
from parley.workflows.ledger import Ledger, error_result
from parley.workflows.notifying import Notifier
from parley.workflows.publishing import set_status
from parley.workflows.subagents import Subagents
from parley.workflows.triage import Proposal, Refuse, Run, Verdict, Wait, triage
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from parley.contracts import (
    CALL_MODEL,
    CANONICAL_ARGS,
    PREVIEW_ARGS_CHARS,
    RUN_TOOL,
    CallModelInput,
    CallModelOutput,
    CanonicalArgsInput,
    CanonicalArgsOutput,
    ConversationStart,
    ConversationState,
    DecideInput,
    Decision,
    PendingCall,
    PolicyOutcome,
    RememberedDecision,
    RunToolInput,
    RunToolOutput,
    ToolCall,
    ToolCatalogue,
    ToolErrorInfo,
    ToolResult,
    TurnResult,
    args_hash,
    call_shape,
    call_summary,
)
from parley.errors import MODEL_VISIBLE_TOOL_ERRORS, ErrorType, InvalidDecision
from parley.settings import CANONICAL_ARGS_ACTIVITY, MODEL_ACTIVITY, TOOL_ACTIVITY

#: How many remembered decisions a conversation keeps (the oldest go first).
REMEMBERED_KEPT = 64
#: The patch under which an edit is a new proposal (``canonical_args``, then the rules);
#: histories recorded before it replay the old way (the edit ran as given).
EDITS_ARE_PROPOSALS = "edits-are-proposals"


class TurnFailed(Exception):
    """Stops a turn closed: nothing else runs, the model is not called again."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def text_of(message: AIMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in message.content
    )


class TurnEngine:
    def __init__(
        self,
        state: ConversationState,
        start: ConversationStart,
        ledger: Ledger,
        events: EventLog,
    ) -> None:
        self._state = state
        self._start = start
        self._ledger = ledger
        self._events = events
        self.notifier = Notifier(state, start, ledger, self._catalogue)
        self.subagents = Subagents(state, start, ledger, self._catalogue)

    async def run(
        self,
        *,
        decisions: DecideInput | None = None,
        expired: list[PendingCall] | None = None,
        subagent_news: bool = False,
    ) -> TurnResult:
        """Run until the turn rests. The caller has set ``state.turn_running``; this
        clears it, whatever happens. Edits that the rules refuse raise
        ``InvalidDecision`` before anything is applied."""
        state = self._state
        edits: dict[str, tuple[ToolCall, Verdict]] = {}
        if decisions is not None:
            try:
                edits = await self._review_edits(decisions)
            except InvalidDecision:
                state.turn_running = False
                raise
        state.runs += 1
        run_id = f"run-{state.runs}"
        state.turn_results = []
        pending_before = {call.tool_call_id for call in state.pending}
        if decisions is not None or expired:
            self.notifier.cancel_all()  # the calls it announced are being answered
        self._events.run_started(run_id)
        set_status(state, "running")
        try:
            if decisions is not None:
                await self._apply_decisions(decisions, edits)
            for call in expired or []:
                self._answer_timed_out(call)
            if subagent_news:
                self.subagents.apply_news()
            if state.pending:
                result = self._ledger.turn_result("awaiting_approval")
            else:
                result = await self._model_loop(check_catalogue=decisions is None)
        except TurnFailed as failure:
            self.subagents.stop("the turn that started it failed")
            result = self._fail(failure)
        except Exception as err:  # a bug must not leave the turn "running" for ever
            workflow.logger.exception("turn failed unexpectedly")
            state.pending = []
            self.subagents.stop("the turn that started it failed")
            result = self._fail(
                TurnFailed(f"internal error: {type(err).__name__}: {err}", "InternalError")
            )
        finally:
            state.turn_running = False
        if result.status == "awaiting_approval":
            self._events.run_finished(run_id, state.pending, self._catalogue())
            set_status(state, "awaiting_approval")
            if new_pending := {c.tool_call_id for c in state.pending} - pending_before:
                metrics.approvals_requested(len(new_pending))
                self.notifier.announce(run_id)
        elif result.status == "completed":
            self._events.run_finished(run_id, [], self._catalogue())
            set_status(state, "idle")
        else:
            set_status(state, "failed")
        state.last_turn = result
        self._ledger.trim()
        if self._start.subagent is not None and result.status == "awaiting_approval":
            await self.subagents.report_to_parent(result.results)
        return result

    def _answer_timed_out(self, call: PendingCall) -> None:
        """A call nobody decided on in time: expired, or rejected if its rule says so."""
        rule = call.on_timeout
        seconds = self._start.pending_expiry_seconds if rule is None else rule.seconds
        waited = seconds * (2 if rule is not None and rule.escalated else 1)
        if rule is not None and rule.action == "reject":
            reason = rule.reason or "nobody decided on it in time"
            content = (
                f"Rejected: {reason} (no decision within {_duration(waited)}); this call to "
                f"{call.name} did not run."
            )
            payload = {"decision": "reject", "message": reason, "by": "timeout"}
            result = ToolResult(status="rejected", content=content, payload=payload)
            self._ledger.answer(call, result, "expired", detail={"on_timeout": "reject"})
            return
        self._ledger.answer_unrun(call, f"nobody decided on it within {_duration(waited)}")

    def _fail(self, failure: TurnFailed) -> TurnResult:
        self._events.run_error(failure.message, failure.code)
        self._ledger.audit("turn_failed", "parley", detail={"error": failure.message})
        return self._ledger.turn_result("failed", error=failure.message)

    def _catalogue(self) -> ToolCatalogue:
        """The worker's tools; in a subagent's conversation, only those it may use."""
        catalogue = self._state.tools or ToolCatalogue(tools=[])
        if self._start.subagent is not None:
            return catalogue.for_subagent(self._start.subagent.name)
        return catalogue

    # --- the model ----------------------------------------------------------------------

    async def _model_loop(self, *, check_catalogue: bool) -> TurnResult:
        """Call the model until it answers in text or proposes calls that wait for a
        decision. A turn that a message starts checks the worker's tool catalogue on its
        first call (a deploy in between is seen at the next message)."""
        for call_number in range(self._start.max_model_calls_per_turn):
            ai = await self._call_model(check_catalogue=check_catalogue and call_number == 0)
            if not ai.tool_calls and not ai.invalid_tool_calls:
                return self._ledger.turn_result("completed", reply=text_of(ai))
            await self._handle_proposals(ai)
            if self._state.pending:
                return self._ledger.turn_result("awaiting_approval", reply=text_of(ai) or None)
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
        state.counters.model_calls += 1
        stored = state.model_context.length if state.model_context else 0
        new_messages = state.transcript[stored - state.transcript_offset :]
        known = (state.tools.version if state.tools else "") if check_catalogue else None
        try:
            output: CallModelOutput = await workflow.execute_activity(
                CALL_MODEL,
                CallModelInput(
                    context=state.model_context,
                    new_messages=new_messages,
                    catalogue_version=known,
                    subagent=self._start.subagent.name if self._start.subagent else None,
                ),
                start_to_close_timeout=MODEL_ACTIVITY.start_to_close,
                heartbeat_timeout=MODEL_ACTIVITY.heartbeat,
                retry_policy=MODEL_ACTIVITY.retry,
                result_type=CallModelOutput,
            )
        except ActivityError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            code = (cause.type if isinstance(cause, ApplicationError) else None) or "model"
            raise TurnFailed(f"the model call failed: {message}", code) from err
        ai = output.message
        if output.catalogue is not None:
            state.tools = output.catalogue
        state.transcript.append(ai)
        state.model_context = output.context
        text = text_of(ai)
        if text:
            self._events.text_message(ai.id or f"msg-{state.transcript_length}", text)
        return ai

    def _proposal(self, catalogue: ToolCatalogue | None = None) -> Proposal:
        """What ``triage`` judges a call by, now."""
        return Proposal(
            catalogue=catalogue or self._catalogue(),
            remembered=self._state.remembered,
            now=workflow.now(),
            expiry_seconds=self._start.pending_expiry_seconds,
            owner=self._state.user_id,
            reviewers=self._state.reviewers,
        )

    async def _handle_proposals(self, ai: AIMessage) -> None:
        """Sort each proposed call (canonical arguments): refused, run now, or pending."""
        to_run: list[tuple[ToolCall, Run]] = []
        for broken in ai.invalid_tool_calls:  # not JSON, or arguments the tool refused
            call = ToolCall(tool_call_id=broken["id"] or "", name=broken["name"] or "unknown")
            raw = (broken["args"] or "")[:PREVIEW_ARGS_CHARS]
            self._ledger.audit("proposed", "model", call.tool_call_id, call.name, {"raw": raw})
            text = f"the arguments of {call.name} were refused: {broken['error']}"
            self._ledger.answer(call, error_result(ErrorType.TOOL_INPUT, text), "refused")
        proposal = self._proposal()
        for proposed in ai.tool_calls:
            call = ToolCall.of(proposed)
            self._events.tool_call(call.tool_call_id, call.name, call.args, ai.id)
            detail = {"args_hash": args_hash(call.args)}
            self._ledger.audit("proposed", "model", call.tool_call_id, call.name, detail)
            verdict = triage(call, proposal)
            self._audit_policy(call, verdict)
            if isinstance(verdict, Refuse):
                self._ledger.answer(
                    call, error_result(verdict.error_type, verdict.message), "refused"
                )
            elif isinstance(verdict, Run):
                to_run.append((call, verdict))
            else:
                self._state.pending.append(verdict.call)
        try:
            for call, run in to_run:
                remembered = run.remembered
                if remembered is not None:  # the user's own earlier decision, recorded
                    self._ledger.audit(
                        "decided",
                        remembered.decided_by,
                        call.tool_call_id,
                        call.name,
                        {"action": "approve", "remembered_from": remembered.tool_call_id},
                    )
                await self._execute(
                    call,
                    approved_by=remembered.decided_by if remembered else None,
                    rule=run.outcome.rule,
                )
        except TurnFailed:
            self._ledger.abandon_unanswered(ai)
            raise

    def _audit_policy(self, call: ToolCall, verdict: Verdict) -> None:
        """Record which rule (or remembered decision) decided a call's policy."""
        outcome: PolicyOutcome | None = verdict.outcome
        if outcome is not None and (outcome.rule is not None or outcome.remembered):
            detail = outcome.model_dump(exclude_defaults=True)
            self._ledger.audit("policy", "parley", call.tool_call_id, call.name, detail)

    # --- decisions ----------------------------------------------------------------------

    async def _review_edits(self, decide: DecideInput) -> dict[str, tuple[ToolCall, Verdict]]:
        """Each edit as a new proposal: its arguments made canonical by the worker, then
        judged by the same rules (``triage``, with the editor). Any edit refused (the
        arguments do not fit, or a rule denies them) refuses the whole decision, naming
        why; nothing is applied."""
        edits = [d for d in decide.decisions if d.action == "edit"]
        if not edits or not workflow.patched(EDITS_ARE_PROPOSALS):
            return {}
        pending = {call.tool_call_id: call for call in self._state.pending}
        reviews: dict[str, tuple[ToolCall, Verdict]] = {}
        problems: list[str] = []
        for decision in edits:
            call = pending[decision.tool_call_id]
            subagent = call.subagent.name if call.subagent else None
            if subagent is None and self._start.subagent is not None:
                subagent = self._start.subagent.name
            try:
                output: CanonicalArgsOutput = await workflow.execute_activity(
                    CANONICAL_ARGS,
                    CanonicalArgsInput(name=call.name, args=decision.args or {}, subagent=subagent),
                    start_to_close_timeout=CANONICAL_ARGS_ACTIVITY.start_to_close,
                    retry_policy=CANONICAL_ARGS_ACTIVITY.retry,
                    result_type=CanonicalArgsOutput,
                    summary=f"canonical_args {call.name} (an edit of {call.tool_call_id})",
                )
            except ActivityError as err:
                cause = err.cause
                why = cause.message if isinstance(cause, ApplicationError) else str(cause)
                problems.append(f"edited args for {call.tool_call_id} are invalid: {why}")
                continue
            edited = ToolCall(tool_call_id=call.tool_call_id, name=call.name, args=output.args)
            catalogue = self._catalogue()
            if call.subagent is not None:
                catalogue = catalogue.for_subagent(call.subagent.name)
            verdict = triage(edited, self._proposal(catalogue), edited_by=decide.decided_by)
            if isinstance(verdict, Refuse):
                problems.append(f"the edit of {call.tool_call_id} is refused: {verdict.message}")
            reviews[call.tool_call_id] = (edited, verdict)
        if problems:
            raise InvalidDecision(
                "decision refused: " + "; ".join(problems) + ". Nothing was applied; the "
                "calls still wait."
            )
        return reviews

    async def _apply_decisions(
        self, decide: DecideInput, edits: dict[str, tuple[ToolCall, Verdict]]
    ) -> None:
        by_id = {d.tool_call_id: d for d in decide.decisions}
        pending, self._state.pending = self._state.pending, []
        self._state.counters.decisions += len(pending)
        metrics.approvals_answered(len(pending))
        own = [call for call in pending if call.subagent is None]
        owner_ai = self._ai_message_of(own[0].tool_call_id) if own else None
        passed_on: dict[str, list[Decision]] = {}
        try:
            for call in pending:
                decision = by_id[call.tool_call_id]
                edit = edits.get(call.tool_call_id)
                if edit is not None:  # the canonical arguments, passed on as such
                    decision = decision.model_copy(update={"args": edit[0].args})
                metrics.decided(decision.action)
                detail = decision.model_dump(exclude_none=True, exclude_defaults=True)
                detail["args_hash"] = args_hash(edit[0].args) if edit else call.args_hash
                if call.subagent is not None:
                    detail["subagent"] = call.subagent.session_id
                    passed_on.setdefault(call.subagent.tool_call_id, []).append(decision)
                self._ledger.audit(
                    "decided", decide.decided_by, call.tool_call_id, call.name, detail
                )
                if call.subagent is not None:
                    continue  # the subagent's conversation applies it (and remembers it)
                if decision.remember:
                    self._remember(call, decision, decide.decided_by)
                await self._apply_decision(call, decision, decide.decided_by, edit)
        except TurnFailed:
            if owner_ai is not None:
                self._ledger.abandon_unanswered(owner_ai)
            raise
        if passed_on:
            await self.subagents.pass_on(passed_on, decide.decided_by)

    def _remember(self, call: PendingCall, decision: Decision, decided_by: str) -> None:
        """Later calls of this shape take this decision without asking (bounded)."""
        remembered = RememberedDecision(
            shape=call_shape(call.name, call.args),
            policy="auto" if decision.action == "approve" else "deny",
            decided_by=decided_by,
            tool_call_id=call.tool_call_id,
        )
        kept = [r for r in self._state.remembered if r.shape != remembered.shape]
        self._state.remembered = [*kept, remembered][-REMEMBERED_KEPT:]
        self._ledger.audit(
            "remembered", decided_by, call.tool_call_id, call.name, {"policy": remembered.policy}
        )

    async def _apply_decision(
        self,
        call: PendingCall,
        decision: Decision,
        decided_by: str,
        edit: tuple[ToolCall, Verdict] | None,
    ) -> None:
        if decision.action == "approve":
            await self._execute(call, approved_by=decided_by, edited_by=call.edited_by)
        elif decision.action == "edit" and edit is None:  # recorded before the patch
            edited = ToolCall(tool_call_id=call.tool_call_id, name=call.name, args=decision.args)
            await self._execute(edited, approved_by=decided_by, edited_by=decided_by)
        elif decision.action == "edit":
            assert edit is not None
            edited, verdict = edit
            if isinstance(verdict, Wait):  # a new proposal that waits (for a reviewer)
                self._state.pending.append(verdict.call)
                detail = {"args_hash": verdict.call.args_hash, "edited": True}
                self._ledger.audit("proposed", decided_by, call.tool_call_id, call.name, detail)
                self._audit_policy(edited, verdict)
            else:
                assert isinstance(verdict, Run)
                self._audit_policy(edited, verdict)
                await self._execute(edited, approved_by=decided_by, edited_by=decided_by)
        elif decision.action == "reject":
            reason = ""
            said = (decision.message or "").strip()
            if said:
                reason = f" Their reason: {said}" + ("" if said[-1:] in ".!?。！？" else ".")
            content = (
                f"The user rejected this call to {call.name}; it did not run.{reason} "
                "Do not retry it unless the user asks you to."
            )
            payload = {"decision": "reject", "message": decision.message}
            self._ledger.answer(
                call, ToolResult(status="rejected", content=content, payload=payload), "decided"
            )
        else:  # respond
            payload = {"decision": "respond", "message": decision.message}
            result = ToolResult(status="rejected", content=decision.message or "", payload=payload)
            self._ledger.answer(call, result, "decided")

    def _ai_message_of(self, tool_call_id: str) -> AIMessage | None:
        for message in reversed(self._state.transcript):
            if isinstance(message, AIMessage) and any(
                c["id"] == tool_call_id for c in message.tool_calls
            ):
                return message
        return None

    # --- the one path that runs a tool ---------------------------------------------------

    async def _execute(
        self,
        call: ToolCall,
        *,
        approved_by: str | None = None,
        edited_by: str | None = None,
        rule: str | None = None,
    ) -> None:
        """Run a tool with the call's (canonical) arguments, before or after a decision,
        and answer its call; a subagent's tool starts its conversation instead."""
        args = call.args
        if self._catalogue().subagent(call.name) is not None:
            await self.subagents.delegate(call, args)
            return
        self._state.counters.tool_runs += 1
        try:
            output: RunToolOutput = await workflow.execute_activity(
                RUN_TOOL,
                RunToolInput(
                    name=call.name,
                    args=args,
                    args_hash=args_hash(args),
                    tool_call_id=call.tool_call_id,
                    user_id=self._state.user_id,
                    approved_by=approved_by,
                    rule=rule,
                    evaluated_at=workflow.now() if rule else None,
                    subagent=self._start.subagent.name if self._start.subagent else None,
                ),
                start_to_close_timeout=TOOL_ACTIVITY.start_to_close,
                heartbeat_timeout=TOOL_ACTIVITY.heartbeat,
                retry_policy=TOOL_ACTIVITY.retry,
                result_type=RunToolOutput,
                summary=call_summary(call.name, args),
            )
            result = output.result
        except ActivityError as err:
            result = self._failed(call, err)
        metrics.tool_ran(call.name, result.status)
        detail: dict[str, Any] | None = None
        if edited_by is not None:
            who = "the owner" if edited_by == self._state.user_id else "a reviewer"
            result = result.model_copy(
                update={
                    "content": f"{result.content}\n({edited_by}, {who}, changed the arguments "
                    f"before this ran; it ran with {json.dumps(args, ensure_ascii=False)}.)",
                }
            )
            detail = {"edited_args": args, "edited_by": edited_by}
        self._ledger.answer(call, result, "ran", detail=detail)

    def _failed(self, call: ToolCall, err: ActivityError) -> ToolResult:
        """What a failed ``run_tool`` means: an error the model can read (input,
        permission), or a failure that stops the turn closed."""
        cause = err.cause
        error_type = cause.type if isinstance(cause, ApplicationError) else None
        if not isinstance(cause, ApplicationError) or error_type not in MODEL_VISIBLE_TOOL_ERRORS:
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            failed = error_result(
                error_type or ErrorType.TOOL_FAILED,
                f"{call.name} failed unexpectedly and the turn was stopped: {message}",
            )
            self._ledger.answer(call, failed, "failed")
            metrics.tool_ran(call.name, "failed")
            raise TurnFailed(
                f"tool {call.name} failed: {message}", error_type or ErrorType.TOOL_FAILED
            ) from err
        info = ToolErrorInfo.model_validate(cause.details[0]) if cause.details else None
        return error_result(
            error_type or ErrorType.TOOL_FAILED,
            info.message if info else cause.message,
            http_status=info.http_status if info else None,
            body=info.body if info else None,
        )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
