"""ConversationWorkflow: one durable conversation with a confirmation gate. Workflow side.

One workflow per conversation (id ``conversation-<session_id>``), started by
update-with-start on the first message. The user talks to it through updates:

- ``send_message`` runs a turn: the model proposes, ``auto`` tools run, ``confirm`` tools
  become pending, and the update returns a ``TurnResult`` when the turn comes to rest;
- ``decide`` answers every pending call at once (approve, edit, reject, respond) and
  returns the ``TurnResult`` of the turn it resumes;
- ``end`` closes the conversation once the turn in flight is done;
- ``wait_for_events`` returns once the AG-UI event log has an event after a given
  offset (a blocking read for the gateway's one subscription per conversation; the
  events themselves are read with the ``events`` query, so they do not enter history);
- the ``upgrade`` signal only wakes the conversation: a run pinned to an older worker
  build sees that a newer build is current and moves to it (continue-as-new) as soon
  as no turn is in flight; ``parley deploy`` sends it to conversations waiting on people;
- the ``decide_signal`` signal carries the same decision as ``decide`` for channels that
  cannot wait for an answer; it is applied between turns, and one that no longer fits
  is recorded as refused (audit log and a ``CUSTOM`` event), never dropped.

Subagents (``subagents``) are this same workflow, started as a child with
``ConversationStart.subagent``: its task is its one message; it reports to its parent
(``subagent_report``) and takes the parent's decisions by ``decide_signal``. On a
versioned worker a run is pinned to its build and moves at continue-as-new
(``handover``, which also keeps every per-run limit).

This module holds the handlers, their deduplication and the run loop. The rest is in
one module per job: ``gate`` (the checks that validators and handlers make), ``turns``
(the turn engine), ``triage`` (one proposal's verdict), ``decisions``, ``subagents``,
``notifying``, ``deadlines``, ``handover``, ``ledger`` (the one place a call is
answered; the bounded state and its pages), ``publishing`` (what the Temporal UI shows)
and ``events`` (the AG-UI event log). Side effects live in activities, called by name;
these modules import only ``parley`` contracts, passed through the sandbox.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import HumanMessage, SystemMessage
    from parley.workflows import gate, metrics
    from parley.workflows.deadlines import Deadlines
    from parley.workflows.dedup import Deduplication
    from parley.workflows.events import EventLog
    from parley.workflows.handover import Handover, build_of_this_run
    from parley.workflows.ledger import Ledger
    from parley.workflows.publishing import publish_owner, publish_status
    from parley.workflows.turns import TurnEngine

    from parley.contracts import (
        ConversationSnapshot,
        ConversationStart,
        ConversationState,
        DecideInput,
        EndInput,
        EventPage,
        EventsQuery,
        EventsWait,
        OffsetEvent,
        SendMessageInput,
        StateQuery,
        SubagentReport,
        SubagentTask,
        TurnResult,
    )
    from parley.errors import (
        ConversationEnded,
        ConversationHandingOver,
        InvalidDecision,
        InvalidMessage,
        Refusal,
    )


#: How many ``wait_for_events`` calls may wait at once. A newer one releases the
#: oldest, so subscribers that went away (a gateway restarted) never pile up against
#: Temporal's limit on updates in flight, which a decision must never meet.
EVENT_WAITERS_KEPT = 4
#: How many ``decide_signal`` decisions may wait for the turn in flight.
QUEUED_DECISIONS_KEPT = 16


@workflow.defn  # pinned by the versioned worker (``parley.worker.deployment_config``)
class ConversationWorkflow:
    @workflow.init
    def __init__(self, start: ConversationStart) -> None:
        self._start = start
        self._state = start.carried_state or ConversationState(
            session_id=start.session_id,
            user_id=start.user_id,
            reviewers=start.reviewers,
        )
        self._events = EventLog(self._state, thread_id=start.session_id)
        self._ledger = Ledger(self._state, self._events)
        self._turns = TurnEngine(self._state, start, self._ledger, self._events)
        self._results = Deduplication(self._state)
        #: One token per waiting ``wait_for_events``, oldest first.
        self._event_waiters: list[object] = []
        #: Set when this run hands over to the next (continue-as-new): waiters are let go.
        self._handing_over = False
        self._handover = Handover(self._state, start, self._ledger)
        self._deadlines = Deadlines(self._state, start, self._ledger, self._turns)

    # --- run: the conversation's lifetime -------------------------------------------

    @workflow.run
    async def run(self, start: ConversationStart) -> ConversationSnapshot:
        publish_owner(self._state)
        publish_status(self._state)
        try:
            if start.subagent is not None and start.carried_state is None:
                await self._take_task(start.subagent)
            await self._converse(start)
        except asyncio.CancelledError:
            # Cancelled (a parent that ended, or an operator): nothing pending runs.
            if not self._state.ended:
                self._state.ended = True
                self._ledger.audit("ended", "parley", detail={"reason": "cancelled"})
            self._close()
            raise
        self._event_waiters.clear()
        self._turns.notifier.cancel_all()  # the conversation ended: nobody need be told
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._close()
        if start.subagent is not None:
            # What the parent reads (``last_turn``), not pages it never shows.
            return self._ledger.snapshot(
                StateQuery(user_id=self._state.user_id, transcript_limit=0, audit_limit=0)
            )
        return self._ledger.snapshot(StateQuery(user_id=self._state.user_id))

    async def _converse(self, start: ConversationStart) -> None:
        """Until the conversation ends: deadlines, queued decisions, subagents' news and
        continue-as-new, each between turns."""
        while True:
            # Wake also when the earliest deadline changes (a turn left calls pending, a
            # decision cleared them), so that the timer below always matches it.
            deadline = self._deadlines.next()
            try:
                await workflow.wait_condition(
                    lambda deadline=deadline: (
                        self._state.ended
                        or (not self._state.turn_running and self._deadlines.expired() != [])
                        or (not self._state.turn_running and self._state.queued_decisions != [])
                        or (not self._state.turn_running and self._turns.subagents.has_news())
                        or self._task_done()
                        or self._should_continue_as_new()
                        or self._deadlines.next() != deadline
                    ),
                    timeout=self._deadlines.time_to_next(),
                )
            except TimeoutError:
                pass
            if self._state.ended:
                break
            if self._task_done():
                self._state.ended = True
                self._ledger.audit("ended", "parley", detail={"reason": "task done"})
                break
            if not self._state.turn_running and self._deadlines.expired():
                await self._deadlines.expire_due()
            elif not self._state.turn_running and self._state.queued_decisions:
                await self._apply_queued_decision()
            elif not self._state.turn_running and self._turns.subagents.has_news():
                self._state.turn_running = True
                await self._turns.run(subagent_news=True)
            elif self._should_continue_as_new():
                self._handing_over = True
                self._event_waiters.clear()
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._state.turn_running and not self._state.ended:
                    self._state.counters.continued_as_new += 1
                    if self._handover.upgrade_due():
                        self._handover.record_upgrade()
                    # A versioned run's next run starts on the task queue's current
                    # build (the same one unless a deploy made another current), then
                    # pins there. Temporal refuses the option from unversioned workers.
                    workflow.continue_as_new(
                        start.model_copy(update={"carried_state": self._state}),
                        initial_versioning_behavior=(
                            workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
                            if build_of_this_run()
                            else None
                        ),
                    )
                self._handing_over = False

    async def _take_task(self, task: SubagentTask) -> None:
        """A subagent's conversation begins: its parent's task is its one message."""
        self._state.turn_running = True
        if task.instructions:
            instructions = SystemMessage(content=task.instructions, id="instructions")
            self._state.transcript.append(instructions)
        self._state.transcript.append(HumanMessage(content=task.task, id="task"))
        self._ledger.audit(
            "message",
            self._state.user_id,
            detail={"message_id": "task", "from": task.parent_workflow_id},
        )
        await self._turns.run()

    def _task_done(self) -> bool:
        """A subagent's conversation whose task has its answer (or failed): it ends, and
        its parent reads the last turn."""
        state = self._state
        return (
            self._start.subagent is not None
            and not state.turn_running
            and not state.pending
            and not state.queued_decisions
            and state.last_turn is not None
            and state.last_turn.status != "awaiting_approval"
        )

    def _close(self) -> None:
        """The end of the conversation, once: what is pending is answered, never run."""
        if self._state.status == "ended":
            return
        self._turns.subagents.stop("the conversation ended")
        for call in self._state.pending:
            self._ledger.answer_unrun(call, "the conversation ended before anyone decided on it")
        metrics.approvals_answered(len(self._state.pending))
        self._state.pending = []
        self._state.status = "ended"
        publish_status(self._state)

    def _should_continue_as_new(self) -> bool:
        state = self._state
        busy = bool(
            state.turn_running
            or state.queued_decisions
            or self._turns.notifier.in_flight  # a notification finishes in this run
            or state.delegations  # its child workflows belong to this run
        )
        return self._handover.due(busy=busy)

    # --- updates ----------------------------------------------------------------------

    @workflow.update
    async def send_message(self, raw: Any) -> TurnResult:
        self._handover.updates += 1
        message = gate.parse(SendMessageInput, raw, InvalidMessage)
        gate.check_owner(self._state, message.user_id)
        if replayed := self._results.earlier():
            return replayed
        self._check_message(message)  # again: two updates may pass validation together
        self._state.turn_running = True
        self._state.transcript.append(HumanMessage(content=message.text, id=message.message_id))
        self._ledger.audit("message", message.user_id, detail={"message_id": message.message_id})
        self._state.counters.turns += 1
        metrics.turn_started()
        return self._results.remember(await self._turns.run())

    @send_message.validator
    def _validate_send_message(self, raw: Any) -> None:
        message = gate.parse(SendMessageInput, raw, InvalidMessage)
        gate.check_owner(self._state, message.user_id)
        if not self._results.earlier():
            self._check_message(message)

    @workflow.update
    async def decide(self, raw: Any) -> TurnResult:
        self._handover.updates += 1
        decision = gate.parse(DecideInput, raw, InvalidDecision)
        gate.check_member(self._state, decision.decided_by)
        if replayed := self._results.earlier():
            return replayed
        if self._results.signalled():  # sent by signal first, when no worker was there
            return await self._results.result_of_signal()
        gate.check_decisions(self._state, decision, workflow.now())  # again: two may race
        self._state.turn_running = True
        return self._results.remember(await self._turns.run(decisions=decision))

    @decide.validator
    def _validate_decide(self, raw: Any) -> None:
        decision = gate.parse(DecideInput, raw, InvalidDecision)
        gate.check_member(self._state, decision.decided_by)
        if not self._results.earlier() and not self._results.signalled():
            gate.check_decisions(self._state, decision, workflow.now())

    @workflow.update
    async def end(self, raw: Any) -> ConversationSnapshot:
        """End the conversation once the turn in flight (if any) is done; pending calls
        are answered ``expired`` and never run. Owner-checked, like every other update.
        Returns the ended conversation's latest page."""
        self._handover.updates += 1
        request = gate.parse(EndInput, raw, InvalidMessage)
        gate.check_owner(self._state, request.user_id)
        if not self._state.ended:
            self._state.ended = True  # from here on, validators refuse sends and decisions
            self._ledger.audit("ended", request.user_id)
        await workflow.wait_condition(lambda: not self._state.turn_running)
        self._close()
        return self._ledger.snapshot(StateQuery(user_id=request.user_id))

    @end.validator
    def _validate_end(self, raw: Any) -> None:
        request = gate.parse(EndInput, raw, InvalidMessage)
        gate.check_owner(self._state, request.user_id)
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")

    @workflow.update
    async def wait_for_events(self, raw: Any) -> int:
        """Wait until the event log has an event after ``request.after`` (or the
        conversation ends, or this run hands over); return the latest offset. Costs two
        small history events per wake-up; the events are read with the query. An
        ``after`` past the latest offset waits for the next event, never spins."""
        self._handover.updates += 1
        request = gate.parse(EventsWait, raw, InvalidMessage)
        after = min(request.after, self._events.last_offset)
        token = object()
        self._event_waiters.append(token)
        if len(self._event_waiters) > EVENT_WAITERS_KEPT:
            self._event_waiters.pop(0)
        try:
            await workflow.wait_condition(
                lambda: (
                    self._events.last_offset > after
                    or self._state.ended
                    or token not in self._event_waiters
                )
            )
        finally:
            if token in self._event_waiters:
                self._event_waiters.remove(token)
        return self._events.last_offset

    @wait_for_events.validator
    def _validate_wait_for_events(self, raw: Any) -> None:
        request = gate.parse(EventsWait, raw, InvalidMessage)
        gate.check_member(self._state, request.user_id)
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")
        if self._handing_over or self._handover.followers_refused:
            raise ConversationHandingOver(
                "this conversation is moving to a new run; wait again in a moment"
            )

    @workflow.signal
    def upgrade(self) -> None:
        """Wake up: the run loop then sees whether a newer worker build is current and,
        if so, moves to it between turns. Temporal tells a waiting workflow nothing
        until its next workflow task, which this signal makes."""
        self._handover.signals += 1

    @workflow.signal
    def decide_signal(self, decision: Any) -> None:
        """The ``decide`` update's decision, fire-and-forget. Applied between turns;
        refused ones are recorded (audit log and a ``CUSTOM`` event), never dropped."""
        self._handover.signals += 1
        try:
            request = gate.parse(DecideInput, decision, InvalidDecision)
        except InvalidDecision as refusal:
            decided_by = decision.get("decided_by") if isinstance(decision, dict) else None
            self._record_refused_decision(str(decided_by or "unknown"), refusal)
            return
        if len(self._state.queued_decisions) >= QUEUED_DECISIONS_KEPT:
            self._record_refused_decision(
                request.decided_by,
                InvalidDecision(
                    f"decision refused: {QUEUED_DECISIONS_KEPT} decisions already wait for "
                    "the turn in flight; send it again when the turn is done"
                ),
                request,
            )
            return
        self._state.queued_decisions.append(request)

    @workflow.signal
    def subagent_report(self, report: SubagentReport) -> None:
        """A subagent at work came to rest waiting for decisions: applied by the turn
        that waits for it, or between turns. One from a subagent no longer at work is
        dropped (its end has been applied)."""
        self._handover.signals += 1
        if any(d.tool_call_id == report.tool_call_id for d in self._state.delegations):
            self._state.subagent_reports.append(report)

    async def _apply_queued_decision(self) -> None:
        request = self._state.queued_decisions.pop(0)
        self._results.applying = request.request_id
        try:
            gate.check_decisions(self._state, request, workflow.now())
            self._state.turn_running = True
            result = await self._turns.run(decisions=request)
            if request.request_id:  # the update of that id gets this result
                self._results.remember(result, request.request_id)
        except Refusal as refusal:  # stale, malformed, or an edit the rules refuse
            self._results.refused(request.request_id, refusal)
            self._record_refused_decision(request.decided_by, refusal, request)
            if self._start.subagent is not None:
                await self._turns.subagents.report_to_parent()  # so the parent stops waiting
        finally:
            self._results.applying = None

    def _record_refused_decision(
        self, decided_by: str, refusal: Refusal, request: DecideInput | None = None
    ) -> None:
        detail: dict[str, Any] = {"type": refusal.type, "message": refusal.message}
        if request is not None:
            detail["decisions"] = [
                d.model_dump(exclude_none=True, exclude_defaults=True) for d in request.decisions
            ]
        self._ledger.audit("decision_refused", decided_by, detail=detail)
        self._events.decision_refused(decided_by, refusal.type or "", refusal.message)

    # --- queries ----------------------------------------------------------------------

    @workflow.query
    def state(self, query: StateQuery) -> ConversationSnapshot:
        gate.check_member(self._state, query.user_id)
        return self._ledger.snapshot(query)

    @workflow.query
    def events(self, query: EventsQuery) -> EventPage:
        gate.check_member(self._state, query.user_id)
        first_kept = self._state.events_offset
        start = max(query.after + 1, first_kept)
        kept = self._state.events[start - first_kept : start - first_kept + query.limit]
        page = [OffsetEvent(offset=start + i, event=event) for i, event in enumerate(kept)]
        next_after = page[-1].offset if page else max(query.after, start - 1)
        return EventPage(
            events=page,
            next_after=next_after,
            first_kept=first_kept,
            latest=self._events.last_offset,
        )

    def _check_message(self, message: SendMessageInput) -> None:
        gate.check_message(
            self._state, message, self._start.max_message_bytes, subagent=self._start.subagent
        )
