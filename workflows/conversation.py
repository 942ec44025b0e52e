"""ConversationWorkflow: one durable conversation with a confirmation gate. Workflow side.

One workflow per conversation (id ``conversation-<session_id>``), started by
update-with-start on the first message. The user talks to it through two updates:

- ``send_message`` runs a turn: the model proposes, ``auto`` tools run, ``confirm`` tools
  become pending, and the update returns a ``TurnResult`` when the turn comes to rest;
- ``decide`` answers every pending call at once (approve, edit, reject, respond) and
  returns the ``TurnResult`` of the turn it resumes.

A pending call runs only inside ``decide`` for its ``tool_call_id`` (F1): no chat text,
no state read, no parallel path can approve it. Tools run through one code path,
``_execute``, before and after a decision (F3). Each pending call has a durable deadline;
when it passes the call is answered ``expired`` and the model is told.

Side effects live in activities, called by name; this module imports only ``parley``
contracts (passed through the sandbox).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import jsonschema
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from parley.contracts import (
        CALL_MODEL,
        KEPT_AUDIT_ENTRIES,
        KEPT_EVENTS,
        KEPT_TRANSCRIPT_CHARS,
        KEPT_TRANSCRIPT_MESSAGES,
        PAGE_CHARS,
        PARLEY_PENDING_TOOLS,
        PARLEY_STATUS,
        PARLEY_USER,
        PAYLOAD_CONTEXT,
        PREVIEW_ARGS_CHARS,
        RUN_TOOL,
        AuditEntry,
        CallModelInput,
        CallModelOutput,
        ConversationSnapshot,
        ConversationStart,
        ConversationState,
        ConversationStatus,
        DecideInput,
        Decision,
        EndInput,
        EventPage,
        EventsQuery,
        OffsetEvent,
        PendingCall,
        RunToolInput,
        RunToolOutput,
        SendMessageInput,
        StateQuery,
        ToolCatalogue,
        ToolErrorInfo,
        ToolResult,
        TurnResult,
        TurnToolResult,
        call_summary,
        message_chars,
        model_view,
        turn_tool_result,
    )
    from parley.errors import MODEL_VISIBLE_TOOL_ERRORS, ErrorType, model_visible_text
    from parley.settings import MODEL_ACTIVITY, TOOL_ACTIVITY
    from workflows.events import EventLog


#: How many update results to keep for deduplicating client retries.
RECENT_RESULTS_KEPT = 32


class _TurnFailed(Exception):
    """Stops a turn closed: nothing else runs, the model is not called again."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _refuse(message: str, error_type: str) -> ApplicationError:
    return ApplicationError(message, type=error_type, non_retryable=True)


def _text_of(message: AIMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in message.content
    )


@workflow.defn
class ConversationWorkflow:
    @workflow.init
    def __init__(self, start: ConversationStart) -> None:
        self._start = start
        self._state = start.carried_state or ConversationState(
            session_id=start.session_id, user_id=start.user_id
        )
        self._events = EventLog(self._state, thread_id=start.session_id)
        self._turn_running = False
        self._turns_this_run = 0
        self._turn_results: list[TurnToolResult] = []

    # --- run: the conversation's lifetime -------------------------------------------

    @workflow.run
    async def run(self, start: ConversationStart) -> ConversationSnapshot:
        if workflow.info().typed_search_attributes.get(PARLEY_USER) != self._state.user_id:
            workflow.upsert_search_attributes([PARLEY_USER.value_set(self._state.user_id)])
        self._publish_status()
        while True:
            # Wake also when the earliest deadline changes (a turn left calls pending, a
            # decision cleared them), so that the timer below always matches it.
            deadline = self._next_deadline()
            try:
                await workflow.wait_condition(
                    lambda deadline=deadline: (
                        self._state.ended
                        or (not self._turn_running and self._expired_calls() != [])
                        or self._should_continue_as_new()
                        or self._next_deadline() != deadline
                    ),
                    timeout=self._time_to_next_deadline(),
                )
            except TimeoutError:
                pass
            if self._state.ended:
                break
            if not self._turn_running and self._expired_calls():
                await self._expire_due_calls()
            elif self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._turn_running and not self._state.ended:
                    self._state.counters.continued_as_new += 1
                    workflow.continue_as_new(
                        start.model_copy(update={"carried_state": self._state})
                    )
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._close()
        return self._snapshot(StateQuery(user_id=self._state.user_id))

    def _close(self) -> None:
        """The end of the conversation, once: what is pending is answered, never run."""
        if self._state.status == "ended":
            return
        for call in self._state.pending:
            self._answer_unrun(call, "the conversation ended before anyone decided on it")
        self._state.pending = []
        self._state.status = "ended"
        self._publish_status()

    def _should_continue_as_new(self) -> bool:
        """Carry the state into a fresh run before history gets long: only between turns,
        so no activity or handler is cut off, and only after a turn in this run, so an
        idle conversation with a small threshold does not continue-as-new in a loop."""
        if self._turn_running or self._turns_this_run == 0:
            return False
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._start.continue_as_new_after_events
        )

    def _expired_calls(self) -> list[PendingCall]:
        now = workflow.now()
        return [call for call in self._state.pending if call.expires_at <= now]

    def _next_deadline(self) -> datetime | None:
        return min((call.expires_at for call in self._state.pending), default=None)

    def _time_to_next_deadline(self) -> timedelta | None:
        earliest = self._next_deadline()
        if earliest is None:
            return None
        return max(earliest - workflow.now(), timedelta(seconds=1))

    # --- updates ----------------------------------------------------------------------

    @workflow.update
    async def send_message(self, message: SendMessageInput) -> TurnResult:
        self._check_owner(message.user_id)
        if replayed := self._earlier_result():
            return replayed
        self._check_can_send(message)  # again: two updates may pass validation together
        self._turn_running = True
        self._state.transcript.append(HumanMessage(content=message.text, id=message.message_id))
        self._audit("message", message.user_id, detail={"message_id": message.message_id})
        self._state.counters.turns += 1
        return self._remember(await self._run_turn())

    @send_message.validator
    def _validate_send_message(self, message: SendMessageInput) -> None:
        self._check_owner(message.user_id)
        if not self._earlier_result():
            self._check_can_send(message)

    @workflow.update
    async def decide(self, decision: DecideInput) -> TurnResult:
        self._check_owner(decision.decided_by)
        if replayed := self._earlier_result():
            return replayed
        self._check_can_decide(decision)  # again: two updates may pass validation together
        self._turn_running = True
        return self._remember(await self._run_turn(decisions=decision))

    @decide.validator
    def _validate_decide(self, decision: DecideInput) -> None:
        self._check_owner(decision.decided_by)
        if not self._earlier_result():
            self._check_can_decide(decision)

    @workflow.update
    async def end(self, request: EndInput) -> ConversationSnapshot:
        """End the conversation once the turn in flight (if any) is done; pending calls
        are answered ``expired`` and never run. Owner-checked, like every other update.
        Returns the ended conversation's latest page."""
        self._check_owner(request.user_id)
        if not self._state.ended:
            self._state.ended = True  # from here on, validators refuse sends and decisions
            self._audit("ended", request.user_id)
        await workflow.wait_condition(lambda: not self._turn_running)
        self._close()
        return self._snapshot(StateQuery(user_id=request.user_id))

    @end.validator
    def _validate_end(self, request: EndInput) -> None:
        self._check_owner(request.user_id)
        if self._state.ended:
            raise _refuse("this conversation has ended", ErrorType.CONVERSATION_ENDED)

    def _earlier_result(self) -> TurnResult | None:
        """The result this update id already had. Temporal deduplicates update ids within
        a run; this keeps a client's retry safe across continue-as-new too."""
        info = workflow.current_update_info()
        return self._state.recent_results.get(info.id) if info else None

    def _remember(self, result: TurnResult) -> TurnResult:
        info = workflow.current_update_info()
        if info:
            self._state.recent_results[info.id] = result
            while len(self._state.recent_results) > RECENT_RESULTS_KEPT:
                del self._state.recent_results[next(iter(self._state.recent_results))]
        return result

    # --- queries ----------------------------------------------------------------------

    @workflow.query
    def state(self, query: StateQuery) -> ConversationSnapshot:
        self._check_owner(query.user_id)
        return self._snapshot(query)

    @workflow.query
    def events(self, query: EventsQuery) -> EventPage:
        self._check_owner(query.user_id)
        first_kept = self._state.events_offset
        start = max(query.after + 1, first_kept)
        kept = self._state.events[start - first_kept : start - first_kept + query.limit]
        page = [OffsetEvent(offset=start + i, event=event) for i, event in enumerate(kept)]
        next_after = page[-1].offset if page else max(query.after, start - 1)
        return EventPage(events=page, next_after=next_after, first_kept=first_kept)

    # --- checks (validators and handlers) -------------------------------------------

    def _check_owner(self, user_id: str) -> None:
        if user_id != self._state.user_id:
            raise _refuse("this conversation belongs to another user", ErrorType.NOT_OWNER)

    def _check_open(self) -> None:
        if self._state.ended:
            raise _refuse("this conversation has ended", ErrorType.CONVERSATION_ENDED)
        if self._turn_running:
            raise _refuse(
                "a turn is still running in this conversation; wait for its result",
                ErrorType.TURN_IN_PROGRESS,
            )

    def _check_can_send(self, message: SendMessageInput) -> None:
        self._check_owner(message.user_id)
        self._check_open()
        if not message.text.strip():
            raise _refuse("the message is empty", ErrorType.INVALID_MESSAGE)
        size = len(message.text.encode("utf-8", errors="surrogatepass"))
        if size > self._start.max_message_bytes:
            raise _refuse(
                f"the message is {size:,} bytes; this conversation takes at most "
                f"{self._start.max_message_bytes:,} bytes per message. Send a shorter "
                "message, or share a large text as a file a tool can read.",
                ErrorType.MESSAGE_TOO_LARGE,
            )
        if self._state.pending:
            ids = ", ".join(f"{c.tool_call_id} ({c.name})" for c in self._state.pending)
            raise _refuse(
                f"{len(self._state.pending)} tool call(s) wait for your decision: {ids}. "
                "Approve, edit, reject or respond to them first; a chat message never "
                "approves a tool call.",
                ErrorType.DECISIONS_OWED,
            )

    def _check_can_decide(self, decision: DecideInput) -> None:
        self._check_owner(decision.decided_by)
        self._check_open()
        # A call past its deadline is expired even if the timer has not fired yet (the
        # decision and the timer may arrive in the same workflow task): never run it.
        expired = {call.tool_call_id for call in self._expired_calls()}
        pending = {
            call.tool_call_id: call
            for call in self._state.pending
            if call.tool_call_id not in expired
        }
        if not pending:
            message = "no tool call waits for a decision"
            if expired:
                message += f"; {', '.join(sorted(expired))} expired and will not run"
            raise _refuse(message, ErrorType.NO_DECISIONS_OWED)
        given = [d.tool_call_id for d in decision.decisions]
        problems: list[str] = []
        if len(given) != len(set(given)):
            problems.append("a tool call is decided more than once")
        late = [i for i in given if i in expired]
        if late:
            problems.append(f"expired, will not run: {', '.join(late)}")
        unknown = [i for i in given if i not in pending and i not in expired]
        if unknown:
            problems.append(f"unknown or no longer pending: {', '.join(unknown)}")
        missing = [i for i in pending if i not in given]
        if missing:
            problems.append(f"missing a decision for: {', '.join(missing)}")
        for d in decision.decisions:
            if d.action == "edit" and d.tool_call_id in pending:
                error = self._args_error(pending[d.tool_call_id].name, d.args or {})
                if error:
                    problems.append(f"edited args for {d.tool_call_id} are invalid: {error}")
        if problems:
            raise _refuse(
                "decision refused: " + "; ".join(problems) + ". Send one decision for "
                "every pending call.",
                ErrorType.INVALID_DECISION,
            )

    def _args_error(self, tool_name: str, args: dict[str, Any]) -> str | None:
        """Why ``args`` do not fit the tool's schema, or None when they do. Arguments the
        schema does not name are refused unless the tool opts in."""
        spec = self._catalogue().get(tool_name)
        if spec is None:
            return f"unknown tool {tool_name!r}"
        schema = spec.args_schema
        if not spec.extra_args_allowed:
            schema = {**schema, "additionalProperties": False}
        errors = sorted(
            jsonschema.Draft202012Validator(schema).iter_errors(args),
            key=lambda e: list(e.path),
        )
        if not errors:
            return None
        return "; ".join(
            (f"{'.'.join(map(str, e.path))}: " if e.path else "") + e.message for e in errors
        )

    def _catalogue(self) -> ToolCatalogue:
        return self._state.tools or ToolCatalogue(tools=[])

    # --- the turn engine ------------------------------------------------------------

    async def _run_turn(
        self,
        *,
        decisions: DecideInput | None = None,
        expired: list[PendingCall] | None = None,
    ) -> TurnResult:
        """Run until the turn rests: a reply, pending calls, or a failure. Always
        leaves every tool call of the transcript answered or pending, and the status
        never ``running``."""
        self._state.runs += 1
        self._turns_this_run += 1
        run_id = f"run-{self._state.runs}"
        self._turn_results = []
        self._events.run_started(run_id)
        self._set_status("running")
        try:
            if decisions is not None:
                await self._apply_decisions(decisions)
            hours = self._start.pending_expiry_seconds / 3600
            for call in expired or []:
                self._answer_unrun(call, f"nobody decided on it within {hours:g} h")
            if self._state.pending:
                result = self._turn_result("awaiting_approval")
            else:
                result = await self._model_loop(check_catalogue=decisions is None)
        except _TurnFailed as failure:
            result = self._fail_turn(failure)
        except Exception as err:  # a bug must not leave the turn "running" for ever
            workflow.logger.exception("turn failed unexpectedly")
            failure = _TurnFailed(f"internal error: {type(err).__name__}: {err}", "InternalError")
            self._state.pending = []
            result = self._fail_turn(failure)
        finally:
            self._turn_running = False
        if result.status == "awaiting_approval":
            self._events.run_finished(run_id, self._state.pending)
            self._set_status("awaiting_approval")
        elif result.status == "completed":
            self._events.run_finished(run_id, [])
            self._set_status("idle")
        else:
            self._set_status("failed")
        self._state.last_turn = result
        self._trim()
        return result

    async def _model_loop(self, *, check_catalogue: bool) -> TurnResult:
        """Call the model until it answers in text or proposes calls that wait for a
        decision. A turn that a message starts checks the worker's tool catalogue on its
        first call (a deploy in between is seen at the next message)."""
        for call_number in range(self._start.max_model_calls_per_turn):
            ai = await self._call_model(check_catalogue=check_catalogue and call_number == 0)
            if not ai.tool_calls and not ai.invalid_tool_calls:
                return self._turn_result("completed", reply=_text_of(ai))
            await self._handle_proposals(ai)
            if self._state.pending:
                return self._turn_result("awaiting_approval", reply=_text_of(ai) or None)
        raise _TurnFailed(
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
        self._state.counters.model_calls += 1
        state = self._state
        stored = state.model_context.length if state.model_context else 0
        new_messages = state.transcript[stored - state.transcript_offset :]
        try:
            output: CallModelOutput = await workflow.execute_activity(
                CALL_MODEL,
                CallModelInput(
                    context=state.model_context,
                    new_messages=new_messages,
                    catalogue_version=(
                        (state.tools.version if state.tools else "") if check_catalogue else None
                    ),
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
            raise _TurnFailed(f"the model call failed: {message}", code) from err
        ai = output.message
        if output.catalogue is not None:
            state.tools = output.catalogue
        state.transcript.append(ai)
        state.model_context = output.context
        text = _text_of(ai)
        if text:
            self._events.text_message(ai.id or f"msg-{state.transcript_length}", text)
        return ai

    async def _handle_proposals(self, ai: AIMessage) -> None:
        """Sort each proposed call: refused, run now (auto), or pending (confirm)."""
        to_run: list[dict[str, Any]] = []
        now = workflow.now()
        expiry = timedelta(seconds=self._start.pending_expiry_seconds)
        for broken in ai.invalid_tool_calls:  # e.g. arguments that are not JSON
            call = {"id": broken["id"] or "", "name": broken["name"] or "unknown", "args": {}}
            raw = (broken["args"] or "")[:PREVIEW_ARGS_CHARS]
            self._audit("proposed", "model", call["id"], call["name"], {"raw": raw})
            text = f"the arguments of {call['name']} could not be parsed: {broken['error']}"
            self._answer(call, self._error_result(ErrorType.TOOL_INPUT, text), "refused")
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            self._events.tool_call(call_id, call["name"], call["args"], ai.id)
            self._audit("proposed", "model", call_id, call["name"])
            spec = self._catalogue().get(call["name"])
            problem = self._args_error(call["name"], call["args"])
            if spec is None or problem:
                known = ", ".join(t.name for t in self._catalogue().tools) or "none"
                text = (
                    f"unknown tool {call['name']!r}; available tools: {known}"
                    if spec is None
                    else f"invalid arguments for {call['name']}: {problem}"
                )
                self._answer(call, self._error_result(ErrorType.TOOL_INPUT, text), "refused")
            elif spec.policy == "deny":
                text = f"{call['name']} is not allowed in this conversation"
                self._answer(call, self._error_result(ErrorType.TOOL_PERMISSION, text), "refused")
            elif spec.policy == "auto":
                to_run.append(call)
            else:
                self._state.pending.append(
                    PendingCall(
                        tool_call_id=call_id,
                        name=call["name"],
                        args=call["args"],
                        description=spec.description,
                        expires_at=now + expiry,
                    )
                )
        try:
            for call in to_run:
                await self._execute(call, call["args"])
        except _TurnFailed:
            self._abandon_unanswered(ai)
            raise

    async def _apply_decisions(self, decide: DecideInput) -> None:
        by_id = {d.tool_call_id: d for d in decide.decisions}
        pending, self._state.pending = self._state.pending, []
        self._state.counters.decisions += len(pending)
        owner_ai = self._ai_message_of(pending[0].tool_call_id)
        try:
            for call in pending:
                decision = by_id[call.tool_call_id]
                self._audit(
                    "decided",
                    decide.decided_by,
                    call.tool_call_id,
                    call.name,
                    decision.model_dump(exclude_none=True),
                )
                await self._apply_decision(call, decision, decide.decided_by)
        except _TurnFailed:
            if owner_ai is not None:
                self._abandon_unanswered(owner_ai)
            raise

    async def _apply_decision(self, call: PendingCall, decision: Decision, decided_by: str) -> None:
        as_call = {"id": call.tool_call_id, "name": call.name, "args": call.args}
        if decision.action == "approve":
            await self._execute(as_call, call.args, approved_by=decided_by)
        elif decision.action == "edit":
            await self._execute(as_call, decision.args or {}, approved_by=decided_by, edited=True)
        elif decision.action == "reject":
            reason = ""
            said = (decision.message or "").strip()
            if said:
                reason = f" Their reason: {said}" + ("" if said[-1:] in ".!?。！？" else ".")
            content = (
                f"The user rejected this call to {call.name}; it did not run.{reason} "
                "Do not retry it unless the user asks you to."
            )
            result = ToolResult(
                status="rejected",
                content=content,
                payload={"decision": "reject", "message": decision.message},
            )
            self._answer(as_call, result, "decided")
        else:  # respond
            result = ToolResult(
                status="rejected",
                content=decision.message or "",
                payload={"decision": "respond", "message": decision.message},
            )
            self._answer(as_call, result, "decided")

    async def _expire_due_calls(self) -> None:
        """Answer every call past its deadline ``expired`` and let the model go on."""
        self._turn_running = True
        due = self._expired_calls()
        self._state.pending = [c for c in self._state.pending if c not in due]
        await self._run_turn(expired=due)

    def _answer_unrun(self, call: PendingCall, why: str) -> None:
        """Answer a pending call that will never run: ``expired``, and the model is told."""
        result = ToolResult(
            status="expired",
            content=(
                f"Error: {why}; this call to {call.name} expired and did not run. "
                "Do not retry it unless the user asks."
            ),
        )
        as_call = {"id": call.tool_call_id, "name": call.name, "args": call.args}
        self._answer(as_call, result, "expired")

    async def _execute(
        self,
        call: dict[str, Any],
        args: dict[str, Any],
        *,
        approved_by: str | None = None,
        edited: bool = False,
    ) -> None:
        """The one path that runs a tool, before and after a decision."""
        call_id = call["id"]
        self._state.counters.tool_runs += 1
        try:
            output: RunToolOutput = await workflow.execute_activity(
                RUN_TOOL,
                RunToolInput(
                    name=call["name"],
                    args=args,
                    tool_call_id=call_id,
                    user_id=self._state.user_id,
                    approved_by=approved_by,
                ),
                start_to_close_timeout=TOOL_ACTIVITY.start_to_close,
                heartbeat_timeout=TOOL_ACTIVITY.heartbeat,
                retry_policy=TOOL_ACTIVITY.retry,
                result_type=RunToolOutput,
                summary=call_summary(call["name"], args),
            )
            result = output.result
        except ActivityError as err:
            cause = err.cause
            error_type = cause.type if isinstance(cause, ApplicationError) else None
            if error_type not in MODEL_VISIBLE_TOOL_ERRORS:
                message = cause.message if isinstance(cause, ApplicationError) else str(cause)
                failed = self._error_result(
                    error_type or ErrorType.TOOL_FAILED,
                    f"{call['name']} failed unexpectedly and the turn was stopped: {message}",
                )
                self._answer(call, failed, "failed")
                raise _TurnFailed(
                    f"tool {call['name']} failed: {message}", error_type or ErrorType.TOOL_FAILED
                ) from err
            assert isinstance(cause, ApplicationError) and error_type is not None
            info = ToolErrorInfo.model_validate(cause.details[0]) if cause.details else None
            result = self._error_result(
                error_type,
                info.message if info else cause.message,
                http_status=info.http_status if info else None,
                body=info.body if info else None,
            )
        if edited:
            result = result.model_copy(
                update={
                    "content": f"{result.content}\n(A reviewer changed the arguments before "
                    f"this ran; it ran with {json.dumps(args)}.)",
                }
            )
        self._answer(call, result, "ran", detail={"edited_args": args} if edited else None)

    # --- answers, failure and bookkeeping ---------------------------------------------

    @staticmethod
    def _error_result(
        error_type: str, message: str, *, http_status: int | None = None, body: Any = None
    ) -> ToolResult:
        return ToolResult(
            status="error",
            content=model_visible_text(error_type, message),
            error=ToolErrorInfo(
                type=error_type, message=message, http_status=http_status, body=body
            ),
        )

    def _answer(
        self,
        call: dict[str, Any],
        result: ToolResult,
        audit_event: str,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Give a tool call its one ToolMessage, event, audit entry and turn result. The
        ToolMessage holds what the model reads (a long result cut, with a note); the
        event, the artifact and the turn result hold previews. The whole result stays
        in history as ``run_tool``'s result."""
        call_id = call["id"]
        reported = turn_tool_result(call_id, call["name"], result)
        # The event's envelope has its four keys (and a note when a preview was cut); the
        # artifact (history) only what is set.
        unset_notes = {
            k for k in ("content_chars", "payload_omitted_bytes") if not getattr(reported, k)
        }
        envelope = reported.model_dump(mode="json", exclude={"tool_call_id", "name", *unset_notes})
        compact = reported.model_dump(
            mode="json", exclude={"tool_call_id", "name", "content"}, context=PAYLOAD_CONTEXT
        )
        message = ToolMessage(
            content=model_view(result.content),
            tool_call_id=call_id,
            name=call["name"],
            status="success" if result.status == "success" else "error",
            # The message's content is the text; the artifact keeps the rest once.
            artifact=compact,
            id=f"result-{call_id}",
        )
        self._state.transcript.append(message)
        self._events.tool_result(message.id or "", call_id, envelope)
        self._audit(
            audit_event,  # type: ignore[arg-type]
            "worker" if audit_event in ("ran", "failed") else "parley",
            call_id,
            call["name"],
            {"status": result.status, **(detail or {})},
        )
        self._turn_results.append(reported)

    def _ai_message_of(self, tool_call_id: str) -> AIMessage | None:
        for message in reversed(self._state.transcript):
            if isinstance(message, AIMessage) and any(
                c["id"] == tool_call_id for c in message.tool_calls
            ):
                return message
        return None

    def _abandon_unanswered(self, ai: AIMessage) -> None:
        """After a fail-closed error, answer the calls that will not run now, so the
        transcript stays valid for the next provider call."""
        answered = {m.tool_call_id for m in self._state.transcript if isinstance(m, ToolMessage)}
        self._state.pending = []
        for call in ai.tool_calls:
            if call["id"] not in answered:
                result = ToolResult(
                    status="error",
                    content="Error: not run: the turn stopped after another call failed.",
                    error=ToolErrorInfo(type=ErrorType.NOT_RUN, message="the turn stopped"),
                )
                self._answer(call, result, "failed")

    def _fail_turn(self, failure: _TurnFailed) -> TurnResult:
        self._events.run_error(failure.message, failure.code)
        self._audit("turn_failed", "parley", detail={"error": failure.message})
        return self._turn_result("failed", error=failure.message)

    def _turn_result(
        self, status: str, *, reply: str | None = None, error: str | None = None
    ) -> TurnResult:
        return TurnResult(
            status=status,  # type: ignore[arg-type]
            reply=reply,
            pending=list(self._state.pending),
            results=list(self._turn_results),
            error=error,
        )

    def _audit(
        self,
        event: str,
        actor: str,
        tool_call_id: str | None = None,
        name: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self._state.audit.append(
            AuditEntry(
                at=workflow.now(),
                event=event,  # type: ignore[arg-type]
                actor=actor,
                tool_call_id=tool_call_id,
                name=name,
                detail=detail or {},
            )
        )

    def _trim(self) -> None:
        """Keep the state bounded: drop the oldest messages (only those already in the
        stored transcript, never the latest model message), audit entries and events."""
        state = self._state
        stored = state.model_context.length if state.model_context else 0
        last_ai = max(
            (i for i, m in enumerate(state.transcript) if isinstance(m, AIMessage)), default=0
        )
        droppable = min(stored - state.transcript_offset, last_ai)
        chars = sum(message_chars(m) for m in state.transcript)
        drop = 0
        while drop < droppable and (
            len(state.transcript) - drop > KEPT_TRANSCRIPT_MESSAGES or chars > KEPT_TRANSCRIPT_CHARS
        ):
            chars -= message_chars(state.transcript[drop])
            drop += 1
        if drop:
            del state.transcript[:drop]
            state.transcript_offset += drop
        if len(state.audit) > KEPT_AUDIT_ENTRIES:
            extra = len(state.audit) - KEPT_AUDIT_ENTRIES
            del state.audit[:extra]
            state.audit_offset += extra
        if len(state.events) > KEPT_EVENTS:
            extra = len(state.events) - KEPT_EVENTS
            del state.events[:extra]
            state.events_offset += extra

    def _snapshot(self, query: StateQuery) -> ConversationSnapshot:
        s = self._state
        transcript, transcript_offset = _page(
            s.transcript,
            s.transcript_offset,
            query.transcript_offset,
            query.transcript_limit,
            message_chars,
        )
        audit, audit_offset = _page(
            s.audit,
            s.audit_offset,
            query.audit_offset,
            query.audit_limit,
            lambda entry: len(json.dumps(entry.detail, default=str)),
        )
        return ConversationSnapshot(
            session_id=s.session_id,
            user_id=s.user_id,
            status=s.status,
            pending=s.pending,
            transcript=transcript,
            transcript_offset=transcript_offset,
            transcript_total=s.transcript_length,
            model_context=s.model_context,
            audit=audit,
            audit_offset=audit_offset,
            audit_total=s.audit_offset + len(s.audit),
            counters=s.counters,
            event_count=s.events_offset + len(s.events),
            last_turn=s.last_turn,
        )

    # --- Temporal UI ------------------------------------------------------------------

    def _set_status(self, status: ConversationStatus) -> None:
        self._state.status = status
        self._publish_status()

    def _publish_status(self) -> None:
        """The conversation's status as search attributes and as the execution's current
        details. The search attributes hold the status at rest (``awaiting_approval``,
        ``idle``, ``failed``, ``ended``) and the pending tools, upserted only when they
        change: each upsert is a history event, and publishing ``running`` would cost
        two per turn for a state that lasts seconds. While a turn runs, the current
        details and the ``state()`` query say ``running``."""
        published = workflow.info().typed_search_attributes
        pending_tools = sorted({c.name for c in self._state.pending})
        changes = []
        if self._state.status != "running" and published.get(PARLEY_STATUS) != self._state.status:
            changes.append(PARLEY_STATUS.value_set(self._state.status))
        if (published.get(PARLEY_PENDING_TOOLS) or []) != pending_tools:
            changes.append(PARLEY_PENDING_TOOLS.value_set(pending_tools))
        if changes:
            workflow.upsert_search_attributes(changes)
        lines = [f"**Status:** {self._state.status}  ", f"**User:** {self._state.user_id}"]
        if self._state.pending:
            lines += ["", "| tool call | tool | args | expires |", "|---|---|---|---|"]
            for c in self._state.pending:
                args = json.dumps(c.args, ensure_ascii=False)
                if len(args) > PREVIEW_ARGS_CHARS:
                    args = args[:PREVIEW_ARGS_CHARS] + " …"
                args = args.replace("|", "\\|")
                lines.append(
                    f"| `{c.tool_call_id}` | {c.name} | `{args}` | {c.expires_at.isoformat()} |"
                )
        workflow.set_current_details("\n".join(lines))


T = TypeVar("T")


def _page(
    kept: list[T], kept_offset: int, offset: int | None, limit: int, size: Callable[[T], int]
) -> tuple[list[T], int]:
    """A page of ``kept`` (whose first item has absolute offset ``kept_offset``):
    from ``offset``, or ending with the newest item when it is None; at most ``limit``
    items and about ``PAGE_CHARS`` characters (never less than one item)."""
    if limit == 0 or not kept:
        return [], kept_offset + len(kept)
    if offset is None:
        end = len(kept)
        start = end
        budget = PAGE_CHARS
        while start > 0 and end - start < limit:
            cost = size(kept[start - 1])
            if start < end and cost > budget:
                break
            budget -= cost
            start -= 1
        return kept[start:end], kept_offset + start
    start = min(max(offset - kept_offset, 0), len(kept))
    end = start
    budget = PAGE_CHARS
    while end < len(kept) and end - start < limit:
        cost = size(kept[end])
        if end > start and cost > budget:
            break
        budget -= cost
        end += 1
    return kept[start:end], kept_offset + start
