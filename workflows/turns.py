"""The turn engine: from a message or a set of decisions to the point where the turn
rests (a reply, calls pending, or a failure). Workflow side (deterministic; side
effects only through the ``call_model`` and ``run_tool`` activities, by name).

A pending call runs only inside :meth:`TurnEngine.run` for the ``decide`` that names it
(F1), and every tool runs through one path, :meth:`TurnEngine._execute`, before and
after a decision (F3). Whatever happens, every call of the transcript ends answered
(through the ledger) or pending, and the status is never left ``running``.

Subagents: a call to one of the catalogue's subagents starts a child conversation (a
child ``ConversationWorkflow``) with the task, and the turn waits until it comes to
rest. Its calls that wait for a decision join this conversation's pending list (marked
with the subagent); a decision on them is passed on to the child (``decide_signal``),
which runs them through its own gate and reports again (``subagent_report``). The
child's reply, when it ends, answers the call that started it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from parley.workflows import metrics
from parley.workflows.events import EventLog
from parley.workflows.gate import args_error
from parley.workflows.ledger import Ledger, error_result
from parley.workflows.publishing import set_status
from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    WorkflowAlreadyStartedError,
)

from parley.contracts import (
    CALL_MODEL,
    NOTIFY,
    PREVIEW_ARGS_CHARS,
    RUN_TOOL,
    CallModelInput,
    CallModelOutput,
    ConversationSnapshot,
    ConversationStart,
    ConversationState,
    DecideInput,
    Decision,
    Delegation,
    NotifyInput,
    OnTimeout,
    PendingCall,
    PolicyOutcome,
    RememberedDecision,
    RunToolInput,
    RunToolOutput,
    SubagentRef,
    SubagentReport,
    SubagentTask,
    ToolCall,
    ToolCatalogue,
    ToolErrorInfo,
    ToolResult,
    ToolSpec,
    TurnResult,
    TurnToolResult,
    call_shape,
    call_summary,
    evaluate,
    subagent_session_id,
    workflow_id_for,
)
from parley.errors import MODEL_VISIBLE_TOOL_ERRORS, ErrorType
from parley.settings import MODEL_ACTIVITY, NOTIFY_ACTIVITY, TOOL_ACTIVITY

#: How many remembered decisions a conversation keeps (the oldest go first).
REMEMBERED_KEPT = 64


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
        self, state: ConversationState, start: ConversationStart, ledger: Ledger, events: EventLog
    ) -> None:
        self._state = state
        self._start = start
        self._ledger = ledger
        self._events = events
        #: ``notify`` calls in flight: the run waits for them before continue-as-new.
        self.notifying: set[asyncio.Task[None]] = set()
        #: The child workflows of ``state.delegations``, by the call that started each.
        self._children: dict[str, workflow.ChildWorkflowHandle[Any, ConversationSnapshot]] = {}

    async def run(
        self,
        *,
        decisions: DecideInput | None = None,
        expired: list[PendingCall] | None = None,
        subagent_news: bool = False,
    ) -> TurnResult:
        """Run until the turn rests. The caller has set ``state.turn_running``; this
        clears it, whatever happens."""
        state = self._state
        state.runs += 1
        run_id = f"run-{state.runs}"
        state.turn_results = []
        pending_before = {call.tool_call_id for call in state.pending}
        if decisions is not None or expired:
            # The calls a notification announced are being answered: stop telling.
            for task in self.notifying:
                task.cancel()
        self._events.run_started(run_id)
        set_status(state, "running")
        try:
            if decisions is not None:
                await self._apply_decisions(decisions)
            for call in expired or []:
                self._answer_timed_out(call)
            if subagent_news:
                self._apply_subagent_news()
            if state.pending:
                result = self._ledger.turn_result("awaiting_approval")
            else:
                result = await self._model_loop(check_catalogue=decisions is None)
        except TurnFailed as failure:
            self.stop_subagents("the turn that started it failed")
            result = self._fail(failure)
        except Exception as err:  # a bug must not leave the turn "running" for ever
            workflow.logger.exception("turn failed unexpectedly")
            state.pending = []
            self.stop_subagents("the turn that started it failed")
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
                self._notify(run_id)
        elif result.status == "completed":
            self._events.run_finished(run_id, [], self._catalogue())
            set_status(state, "idle")
        else:
            set_status(state, "failed")
        state.last_turn = result
        self._ledger.trim()
        if self._start.subagent is not None and result.status == "awaiting_approval":
            await self.report_to_parent(result.results)
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

    def escalate(self, calls: list[PendingCall]) -> None:
        """Tell each call's ``escalate_to`` that it waits (in the background, like
        ``_notify``); the caller has extended the calls' deadlines."""
        by_person: dict[str, list[PendingCall]] = {}
        for call in calls:
            assert call.on_timeout is not None and call.on_timeout.escalate_to
            by_person.setdefault(call.on_timeout.escalate_to, []).append(call)
        for person, escalated in by_person.items():
            ids = "-".join(c.tool_call_id for c in escalated)
            if not self._catalogue().notifications:
                self._ledger.audit(
                    "notified",
                    "worker",
                    detail={"escalated_to": person, "error": "no webhook (PARLEY_NOTIFY_URL)"},
                )
                continue
            self._notify_in_background(
                NotifyInput(
                    session_id=self._state.session_id,
                    user_id=self._state.user_id,
                    pending=escalated,
                    run_id=f"escalate-{ids}",
                    escalated_to=person,
                )
            )

    def _notify(self, run_id: str) -> None:
        """Tell the worker's webhook (if it has one) that calls wait for a decision, in
        the background: the turn's result does not wait for the webhook. A subagent's
        calls are announced by its parent, where they are decided."""
        if not self._catalogue().notifications or self._start.subagent is not None:
            return
        self._notify_in_background(
            NotifyInput(
                session_id=self._state.session_id,
                user_id=self._state.user_id,
                pending=list(self._state.pending),
                run_id=run_id,
            )
        )

    def _notify_in_background(self, request: NotifyInput) -> None:
        """Run ``notify`` beside the conversation; ``notifying`` holds it until done."""
        task = asyncio.ensure_future(self._send_notification(request))
        self.notifying.add(task)
        task.add_done_callback(self.notifying.discard)

    async def _send_notification(self, request: NotifyInput) -> None:
        detail: dict[str, Any] = {"run_id": request.run_id}
        if request.escalated_to:
            detail["escalated_to"] = request.escalated_to
        try:
            await workflow.execute_activity(
                NOTIFY,
                request,
                start_to_close_timeout=NOTIFY_ACTIVITY.start_to_close,
                retry_policy=NOTIFY_ACTIVITY.retry,
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                detail["error"] = "decided before the webhook answered; no longer sent"
            else:
                detail["error"] = (
                    cause.message if isinstance(cause, ApplicationError) else str(cause)
                )
        self._ledger.audit("notified", "worker", detail=detail)

    def _fail(self, failure: TurnFailed) -> TurnResult:
        self._events.run_error(failure.message, failure.code)
        self._ledger.audit("turn_failed", "parley", detail={"error": failure.message})
        return self._ledger.turn_result("failed", error=failure.message)

    def _policy_of(
        self, catalogue: ToolCatalogue, spec: ToolSpec, call: ToolCall
    ) -> tuple[PolicyOutcome, RememberedDecision | None]:
        """The rules first (the first match decides); a call that would wait for a
        decision then takes a remembered decision for its shape, if there is one."""
        outcome = evaluate(catalogue.rules, call.name, call.args, workflow.now(), spec.policy)
        if outcome.policy == "confirm" and not outcome.requires_reviewer:
            shape = call_shape(call.name, call.args)
            for remembered in reversed(self._state.remembered):
                if remembered.shape == shape:
                    return PolicyOutcome(policy=remembered.policy, remembered=True), remembered
        return outcome, None

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

    async def _handle_proposals(self, ai: AIMessage) -> None:
        """Sort each proposed call: refused, run now (auto), or pending (confirm)."""
        to_run: list[tuple[ToolCall, PolicyOutcome, RememberedDecision | None]] = []
        expires_at = workflow.now() + timedelta(seconds=self._start.pending_expiry_seconds)
        for broken in ai.invalid_tool_calls:  # e.g. arguments that are not JSON
            call = ToolCall(tool_call_id=broken["id"] or "", name=broken["name"] or "unknown")
            raw = (broken["args"] or "")[:PREVIEW_ARGS_CHARS]
            self._ledger.audit("proposed", "model", call.tool_call_id, call.name, {"raw": raw})
            text = f"the arguments of {call.name} could not be parsed: {broken['error']}"
            self._ledger.answer(call, error_result(ErrorType.TOOL_INPUT, text), "refused")
        catalogue = self._catalogue()
        for proposed in ai.tool_calls:
            call = ToolCall.of(proposed)
            self._events.tool_call(call.tool_call_id, call.name, call.args, ai.id)
            self._ledger.audit("proposed", "model", call.tool_call_id, call.name)
            spec = catalogue.get(call.name)
            problem = args_error(catalogue, call.name, call.args)
            if spec is None or problem:
                known = ", ".join(t.name for t in catalogue.tools) or "none"
                text = (
                    f"unknown tool {call.name!r}; available tools: {known}"
                    if spec is None
                    else f"invalid arguments for {call.name}: {problem}"
                )
                self._ledger.answer(call, error_result(ErrorType.TOOL_INPUT, text), "refused")
            else:
                outcome, remembered = self._policy_of(catalogue, spec, call)
                if outcome.rule is not None or remembered is not None:
                    self._ledger.audit(
                        "policy",
                        "parley",
                        call.tool_call_id,
                        call.name,
                        outcome.model_dump(exclude_defaults=True),
                    )
                if outcome.policy == "deny":
                    why = f" (rule `{outcome.rule}`)" if outcome.rule else ""
                    if remembered is not None:
                        why = " (a rejection remembered in this conversation)"
                    text = f"{call.name} is not allowed in this conversation{why}"
                    self._ledger.answer(
                        call, error_result(ErrorType.TOOL_PERMISSION, text), "refused"
                    )
                elif outcome.policy == "auto":
                    to_run.append((call, outcome, remembered))
                else:
                    on_timeout = _on_timeout(outcome, self._start.pending_expiry_seconds)
                    self._state.pending.append(
                        PendingCall(
                            **call.model_dump(),
                            description=spec.description,
                            expires_at=(
                                workflow.now() + timedelta(seconds=on_timeout.seconds)
                                if on_timeout
                                else expires_at
                            ),
                            reason=outcome.reason() if outcome.rule else None,
                            on_timeout=on_timeout,
                            reviewer_rule=outcome.rule if outcome.requires_reviewer else None,
                        )
                    )
        try:
            for call, outcome, remembered in to_run:
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
                    call.args,
                    approved_by=remembered.decided_by if remembered else None,
                    rule=outcome.rule,
                )
        except TurnFailed:
            self._ledger.abandon_unanswered(ai)
            raise

    # --- decisions ----------------------------------------------------------------------

    async def _apply_decisions(self, decide: DecideInput) -> None:
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
                metrics.decided(decision.action)
                detail = decision.model_dump(exclude_none=True, exclude_defaults=True)
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
                await self._apply_decision(call, decision, decide.decided_by)
        except TurnFailed:
            if owner_ai is not None:
                self._ledger.abandon_unanswered(owner_ai)
            raise
        if passed_on:
            await self._pass_on(passed_on, decide.decided_by)

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

    async def _apply_decision(self, call: PendingCall, decision: Decision, decided_by: str) -> None:
        if decision.action == "approve":
            await self._execute(call, call.args, approved_by=decided_by)
        elif decision.action == "edit":
            await self._execute(call, decision.args or {}, approved_by=decided_by, edited=True)
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
        args: dict[str, Any],
        *,
        approved_by: str | None = None,
        edited: bool = False,
        rule: str | None = None,
    ) -> None:
        """Run a tool, before or after a decision, and answer its call; a subagent's
        tool starts its conversation instead."""
        if self._catalogue().subagent(call.name) is not None:
            await self._delegate(call, args)
            return
        self._state.counters.tool_runs += 1
        try:
            output: RunToolOutput = await workflow.execute_activity(
                RUN_TOOL,
                RunToolInput(
                    name=call.name,
                    args=args,
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
        if edited:
            result = result.model_copy(
                update={
                    "content": f"{result.content}\n(A reviewer changed the arguments before "
                    f"this ran; it ran with {json.dumps(args)}.)",
                }
            )
        self._ledger.answer(call, result, "ran", detail={"edited_args": args} if edited else None)

    # --- subagents ----------------------------------------------------------------------

    async def _delegate(self, call: ToolCall, args: dict[str, Any]) -> None:
        """Start the subagent's conversation (a child workflow) with the task, and wait
        until it comes to rest: ended (its reply answers ``call``) or waiting for
        decisions (its calls join the pending list)."""
        state = self._state
        spec = self._catalogue().subagent(call.name)
        assert spec is not None
        state.counters.subagents += 1
        session = subagent_session_id(state.session_id, spec.name, state.counters.subagents)
        task = SubagentTask(
            name=spec.name,
            task=str(args.get("task", "")),
            parent_workflow_id=workflow.info().workflow_id,
            tool_call_id=call.tool_call_id,
            instructions=spec.instructions,
        )
        try:
            handle = await workflow.start_child_workflow(
                "ConversationWorkflow",
                ConversationStart(
                    session_id=session,
                    user_id=state.user_id,
                    reviewers=state.reviewers,
                    pending_expiry_seconds=self._start.pending_expiry_seconds,
                    max_model_calls_per_turn=self._start.max_model_calls_per_turn,
                    continue_as_new_after_events=self._start.continue_as_new_after_events,
                    subagent=task,
                ),
                id=workflow_id_for(session),
                result_type=ConversationSnapshot,
                # Should this conversation close without ending it (terminated), Temporal
                # cancels it; an ended conversation cancels it itself.
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                static_summary=f"subagent {spec.name} of {state.session_id}",
            )
        except WorkflowAlreadyStartedError:
            text = f"subagent {spec.name} could not start: {session} is already running"
            self._ledger.answer(call, error_result(ErrorType.SUBAGENT_FAILED, text), "failed")
            return
        self._children[call.tool_call_id] = handle
        state.delegations.append(
            Delegation(name=spec.name, session_id=session, tool_call_id=call.tool_call_id)
        )
        self._ledger.audit(
            "delegated", "parley", call.tool_call_id, call.name, {"session_id": session}
        )
        await self._wait_for_subagents([call.tool_call_id])
        self._apply_subagent_news()

    async def _pass_on(self, decisions: dict[str, list[Decision]], decided_by: str) -> None:
        """Send each subagent the decisions on its calls (by the call that started it),
        then wait until each has come to rest again."""
        for tool_call_id, given in decisions.items():
            handle = self._children.get(tool_call_id)
            if handle is None or handle.done():
                continue  # it ended: its end is applied below
            try:
                await handle.signal(
                    "decide_signal", DecideInput(decisions=given, decided_by=decided_by)
                )
            except Exception as err:  # it ended meanwhile: its end is applied below
                workflow.logger.info("could not pass decisions on to a subagent: %s", err)
        await self._wait_for_subagents(list(decisions))
        self._apply_subagent_news()

    async def _wait_for_subagents(self, tool_call_ids: list[str]) -> None:
        await workflow.wait_condition(lambda: all(self._news_from(i) for i in tool_call_ids))

    def has_subagent_news(self) -> bool:
        """Whether a subagent at work has reported, or ended, since its news was applied."""
        return any(self._news_from(d.tool_call_id) for d in self._state.delegations)

    def _news_from(self, tool_call_id: str) -> bool:
        delegation = self._delegation(tool_call_id)
        handle = self._children.get(tool_call_id)
        if delegation is None or handle is None or handle.done():
            return True
        return any(
            r.tool_call_id == tool_call_id and r.sequence > delegation.reports_seen
            for r in self._state.subagent_reports
        )

    def _delegation(self, tool_call_id: str) -> Delegation | None:
        return next((d for d in self._state.delegations if d.tool_call_id == tool_call_id), None)

    def _apply_subagent_news(self) -> None:
        """Apply the subagents' reports, in order (their waiting calls replace the ones
        they reported before), then the end of those that ended."""
        state = self._state
        reports, state.subagent_reports = state.subagent_reports, []
        for report in reports:
            delegation = self._delegation(report.tool_call_id)
            if delegation is None or report.sequence <= delegation.reports_seen:
                continue  # from a subagent that has ended, or already applied
            delegation.reports_seen = report.sequence
            ref = SubagentRef(
                name=delegation.name,
                session_id=delegation.session_id,
                tool_call_id=delegation.tool_call_id,
            )
            before = self._calls_of(delegation)
            state.pending = [c for c in state.pending if c not in before]
            state.pending += [c.model_copy(update={"subagent": ref}) for c in report.pending]
            # Calls that stopped waiting in the subagent without a decision here.
            metrics.approvals_answered(
                len({c.tool_call_id for c in before} - {c.tool_call_id for c in report.pending})
            )
            state.turn_results += report.results
        for delegation in list(state.delegations):
            handle = self._children.get(delegation.tool_call_id)
            if handle is None or handle.done():
                self._end_delegation(delegation, handle)

    def _calls_of(self, delegation: Delegation) -> list[PendingCall]:
        return [
            c
            for c in self._state.pending
            if c.subagent is not None and c.subagent.tool_call_id == delegation.tool_call_id
        ]

    def _end_delegation(
        self,
        delegation: Delegation,
        handle: workflow.ChildWorkflowHandle[Any, ConversationSnapshot] | None,
    ) -> None:
        """A subagent's conversation ended: its reply (or why it has none) answers the
        call that started it."""
        state = self._state
        state.delegations.remove(delegation)
        self._children.pop(delegation.tool_call_id, None)
        left = self._calls_of(delegation)
        state.pending = [c for c in state.pending if c not in left]
        metrics.approvals_answered(len(left))
        why = "its conversation is gone"
        snapshot: ConversationSnapshot | None = None
        if handle is not None:
            try:
                snapshot = handle.result()
            except BaseException as err:  # ChildWorkflowError, or it was cancelled
                cause = getattr(err, "cause", None) or err
                why = f"its conversation {delegation.session_id} did not end well: {cause}"
        last = snapshot.last_turn if snapshot else None
        if last is not None:
            state.turn_results += last.results
        call = ToolCall(tool_call_id=delegation.tool_call_id, name=delegation.name)
        if last is not None and last.status == "completed":
            content = last.reply or f"(subagent {delegation.name} finished without a word)"
            payload = {"subagent": delegation.session_id}
            result = ToolResult(status="success", content=content, payload=payload)
            self._ledger.answer(call, result, "ran")
        else:
            if last is not None and last.error:
                why = last.error
            elif last is not None:
                why = f"its conversation ended with calls still {last.status}"
            text = f"subagent {delegation.name} could not finish its task: {why}"
            result = error_result(ErrorType.SUBAGENT_FAILED, text)
            self._ledger.answer(call, result, "failed")
        metrics.tool_ran(delegation.name, result.status)

    def stop_subagents(self, why: str) -> None:
        """Cancel every subagent at work (what it waits for never runs) and answer the
        calls that started them, unless already answered: the turn failed closed, or
        the conversation ended."""
        state = self._state
        answered = {m.tool_call_id for m in state.transcript if isinstance(m, ToolMessage)}
        for delegation in state.delegations:
            handle = self._children.pop(delegation.tool_call_id, None)
            if handle is not None and not handle.done():
                handle.cancel()
            metrics.approvals_answered(len(self._calls_of(delegation)))
            if delegation.tool_call_id not in answered:
                call = ToolCall(tool_call_id=delegation.tool_call_id, name=delegation.name)
                self._ledger.answer_unrun(call, f"subagent {delegation.name} was stopped: {why}")
        state.delegations = []
        state.subagent_reports = []
        state.pending = [c for c in state.pending if c.subagent is None]

    async def report_to_parent(self, results: list[TurnToolResult] | None = None) -> None:
        """In a subagent's conversation: tell the parent which calls wait for a decision
        (``subagent_report``). A parent that has ended is told nothing."""
        state = self._state
        task = self._start.subagent
        assert task is not None
        state.reports_sent += 1
        report = SubagentReport(
            tool_call_id=task.tool_call_id,
            sequence=state.reports_sent,
            pending=list(state.pending),
            results=results or [],
        )
        try:
            await workflow.get_external_workflow_handle(task.parent_workflow_id).signal(
                "subagent_report", report
            )
        except Exception as err:
            workflow.logger.info("could not report to the parent conversation: %s", err)

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


def _on_timeout(outcome: PolicyOutcome, default_seconds: float) -> OnTimeout | None:
    """What a matched rule says of a call that waits too long; None: the default."""
    if outcome.rule is None or (outcome.timeout_seconds is None and outcome.on_timeout == "expire"):
        return None
    return OnTimeout(
        action=outcome.on_timeout,
        seconds=outcome.timeout_seconds or default_seconds,
        reason=outcome.timeout_reason,
        escalate_to=outcome.escalate_to,
    )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
