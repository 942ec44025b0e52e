"""ConversationWorkflow: one durable conversation with a confirmation gate. Workflow side.

One workflow per conversation (id ``conversation-<session_id>``), started by
update-with-start on the first message. The user talks to it through updates:

- ``send_message`` runs a turn: the model proposes, ``auto`` tools run, ``confirm`` tools
  become pending, and the update returns a ``TurnResult`` when the turn comes to rest;
- ``decide`` answers every pending call at once (approve, edit, reject, respond) and
  returns the ``TurnResult`` of the turn it resumes;
- ``end`` closes the conversation once the turn in flight is done;
- ``rewind`` keeps the first N messages and goes on in a new run (``rewind``: forks too);
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

This module holds the handlers and what they check. The rest is in one module per
job: ``gate`` (the checks that validators and handlers make), ``dedup`` (results by
update id), ``run_loop`` (between turns, one table of steps), ``turns`` (the turn
engine), ``triage`` (one proposal's verdict), ``decisions``, ``signalled``,
``subagents``, ``notifying``, ``followers``, ``deadlines``, ``handover``, ``busy``
(messages that come while a turn runs: reject, enqueue or interrupt), ``ledger``
(the one place a call is answered; the bounded state and its pages), ``publishing``
(what the Temporal UI shows) and ``events`` (the AG-UI event log). Side effects live
in activities, called by name; these modules import only ``parley`` contracts, passed
through the sandbox.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import HumanMessage

    from parley.contracts import (
        STREAM_DELTA_SIGNAL,
        ConversationSnapshot,
        ConversationStart,
        DecideInput,
        EndInput,
        EventPage,
        EventsQuery,
        EventsWait,
        SendMessageInput,
        StateQuery,
        StreamDelta,
        SubagentReport,
        TurnResult,
    )
    from parley.contracts.busy import WhileBusy
    from parley.contracts.errors import (
        ConversationEnded,
        ConversationHandingOver,
        InvalidDecision,
        InvalidMessage,
    )
    from parley.workflows.lifecycle.followers import Followers
    from parley.workflows.lifecycle.rewind import Rewinder, first_state
    from parley.workflows.lifecycle.run_loop import RunLoop
    from parley.workflows.lifecycle.signalled import SignalledDecisions
    from parley.workflows.record import metrics
    from parley.workflows.record.dedup import Deduplication
    from parley.workflows.record.events import EventLog
    from parley.workflows.record.ledger import Ledger
    from parley.workflows.record.publishing import publish_owner, publish_status
    from parley.workflows.rules import gate
    from parley.workflows.rules.awaiting import awaiting_all
    from parley.workflows.turn.instructions import check_added, take_added
    from parley.workflows.turn.streaming import ReplyStream
    from parley.workflows.turn.turns import TurnEngine


@workflow.defn  # pinned by the versioned worker (``parley.worker.wiring.deployment_config``)
class ConversationWorkflow:
    @workflow.init
    def __init__(self, start: ConversationStart) -> None:
        self._start = start
        self._state = start.carried_state or first_state(start)
        self._events = EventLog(self._state, thread_id=start.session_id)
        self._ledger = Ledger(self._state, self._events)
        self._stream = ReplyStream(self._events)
        self._turns = TurnEngine(self._state, start, self._ledger, self._events, self._stream)
        self._results = Deduplication(self._state)
        self._followers = Followers(self._state, self._events)
        self._signalled = SignalledDecisions(
            self._state, start, self._ledger, self._events, self._turns, self._results
        )
        self._loop = RunLoop(
            self._state, start, self._ledger, self._turns, self._signalled, self._followers
        )
        self._handover = self._loop.handover
        self._rewinder = Rewinder(self._state, self._ledger, self._handover)

    # --- run: the conversation's lifetime -------------------------------------------

    @workflow.run
    async def run(self, start: ConversationStart) -> ConversationSnapshot:
        self._handover.begin()
        publish_owner(self._state)
        publish_status(self._state)
        self._rewinder.record_fork(start)
        try:
            if start.subagent is not None and start.carried_state is None:
                await self._loop.take_task(start.subagent)
            await self._loop.run()
        except asyncio.CancelledError:
            # Cancelled (a parent that ended, or an operator): nothing pending runs.
            if not self._state.ended:
                self._state.ended = True
                self._ledger.audit("ended", "parley", detail={"reason": "cancelled"})
            self._loop.close()
            raise
        self._followers.release_all()
        self._turns.notifier.cancel_all()  # the conversation ended: nobody need be told
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._loop.close()
        if start.subagent is not None:
            # What the parent reads (``last_turn``), not pages it never shows.
            return self._ledger.snapshot(
                StateQuery(user_id=self._state.user_id, transcript_limit=0, audit_limit=0)
            )
        return self._ledger.snapshot(StateQuery(user_id=self._state.user_id))

    # --- updates ----------------------------------------------------------------------

    @workflow.update
    async def send_message(self, raw: Any) -> TurnResult:
        self._handover.updates += 1
        message = gate.parse(SendMessageInput, raw, InvalidMessage)
        gate.check_owner(self._state, message.user_id)
        if replayed := self._results.earlier():
            return replayed
        if self._check_message(message):  # again: two updates may pass validation together
            return await self._turns.busy.wait_for_turn(message, self._while_busy(message))
        self._state.counters.turns += 1
        metrics.turn_started()
        turn = self._turns.run(client=message, opening=lambda: self._open_turn(message))
        return self._results.remember(await turn)

    def _open_turn(self, message: SendMessageInput) -> None:
        """The message enters the conversation, once its run has started: the front
        end's results for its tools' calls (or their answer as never run), its text."""
        self._turns.front_end.take(message)
        take_added(self._state, self._ledger, message)  # the starting message's addition
        if message.text.strip():
            self._state.transcript.messages.append(
                HumanMessage(content=message.text, id=message.message_id)
            )
            detail = {"message_id": message.message_id}
            self._ledger.audit("message", message.user_id, detail=detail)

    @send_message.validator
    def _validate_send_message(self, raw: Any) -> None:
        message = gate.parse(SendMessageInput, raw, InvalidMessage)
        gate.check_owner(self._state, message.user_id)
        if not self._results.earlier() and self._check_message(message):
            if self._handover.pressing():  # queued, it would keep the run from resting
                raise ConversationHandingOver(
                    "this conversation moves to a new run once the turn in flight is "
                    "done; send the message again then"
                )

    def _check_message(self, message: SendMessageInput) -> bool:
        """Whether the message may start a turn now (False) or waits for one (True)."""
        gate.check_client_run(self._state, message, self._start.max_message_bytes, InvalidMessage)
        check_added(self._state, message)  # only the starting message adds instructions
        return gate.check_message(
            self._state,
            message,
            self._start.max_message_bytes,
            subagent=self._start.subagent,
            while_busy=self._while_busy(message),
        )

    def _while_busy(self, message: SendMessageInput) -> WhileBusy:
        """The sender's choice, else the conversation's default (``busy``)."""
        return message.while_busy or self._start.while_busy or "reject"

    @workflow.update
    async def decide(self, raw: Any) -> TurnResult:
        self._handover.updates += 1
        decision = gate.parse(DecideInput, raw, InvalidDecision)
        gate.check_decider(self._state, decision)
        if replayed := self._results.earlier():
            return replayed
        if self._results.signalled():  # sent by signal first, when no worker was there
            return await self._results.result_of_signal()
        self._check_decisions(decision)  # again: two may race
        return self._results.remember(await self._turns.run(decisions=decision))

    @decide.validator
    def _validate_decide(self, raw: Any) -> None:
        decision = gate.parse(DecideInput, raw, InvalidDecision)
        gate.check_decider(self._state, decision)
        if not self._results.earlier() and not self._results.signalled():
            self._check_decisions(decision)

    def _check_decisions(self, decision: DecideInput) -> None:
        gate.check_decisions(self._state, decision, workflow.now())
        limit = self._start.max_message_bytes
        gate.check_client_run(self._state, decision, limit, InvalidDecision)

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
        self._loop.close()
        return self._ledger.snapshot(StateQuery(user_id=request.user_id))

    @end.validator
    def _validate_end(self, raw: Any) -> None:
        request = gate.parse(EndInput, raw, InvalidMessage)
        gate.check_owner(self._state, request.user_id)
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")

    @workflow.update
    def rewind(self, raw: Any) -> ConversationSnapshot:
        """Keep the first N messages; the run then continues as new (``rewind``)."""
        self._handover.updates += 1
        return self._rewinder.rewind(raw)

    @rewind.validator
    def _validate_rewind(self, raw: Any) -> None:
        self._rewinder.check(raw)

    @workflow.update
    async def wait_for_events(self, raw: Any) -> int:
        """Wait until the event log has an event after ``after`` (``followers``); return
        the latest offset. Costs two small history events per wake-up; the events are
        read with the query."""
        self._handover.updates += 1
        request = gate.parse(EventsWait, raw, InvalidMessage)
        return await self._followers.wait(request.after)

    @wait_for_events.validator
    def _validate_wait_for_events(self, raw: Any) -> None:
        request = gate.parse(EventsWait, raw, InvalidMessage)
        gate.check_member(self._state, request.user_id, request.groups)
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")
        if self._followers.handing_over or self._handover.followers_refused:
            raise ConversationHandingOver(
                "this conversation is moving to a new run; wait again in a moment"
            )

    # --- signals ----------------------------------------------------------------------

    @workflow.signal
    def upgrade(self) -> None:
        """Wake up: the run loop then sees whether a newer worker build is current and,
        if so, moves to it between turns. Temporal tells a waiting workflow nothing
        until its next workflow task, which this signal makes."""
        self._handover.signals += 1

    @workflow.signal
    def decide_signal(self, decision: Any) -> None:
        """The ``decide`` update's decision, fire-and-forget (``signalled``). Applied
        between turns; refused ones are recorded, never dropped."""
        self._handover.signals += 1
        self._signalled.receive(decision)

    @workflow.signal(name=STREAM_DELTA_SIGNAL)
    def stream_delta(self, delta: StreamDelta) -> None:
        """A batch of the reply in flight, from ``call_model`` (``streaming``). Counted
        with the run's other signals: Temporal's limit counts every one."""
        self._handover.stream_signals += 1
        self._stream.add(delta)

    @workflow.signal
    def subagent_report(self, report: SubagentReport) -> None:
        """A subagent at work came to rest waiting for decisions: applied by the turn
        that waits for it, or between turns. One from a subagent no longer at work is
        dropped (its end has been applied)."""
        self._handover.signals += 1
        if any(d.tool_call_id == report.tool_call_id for d in self._state.delegations.active):
            self._state.delegations.reports.append(report)

    # --- queries ----------------------------------------------------------------------

    @workflow.query
    def state(self, query: StateQuery) -> ConversationSnapshot:
        escalated = gate.check_reader(self._state, query.user_id, query.groups)
        if escalated is not None:  # the person a call was escalated to: that call only
            snapshot = self._ledger.escalated_snapshot(escalated)
        else:
            snapshot = self._ledger.snapshot(query)
        # Who each call waits for, and what this reader (with their groups) may do, by
        # the gate's own checks.
        snapshot.awaiting = awaiting_all(self._state, snapshot.pending, query.user_id, query.groups)
        return snapshot

    @workflow.query
    def events(self, query: EventsQuery) -> EventPage:
        gate.check_member(self._state, query.user_id, query.groups)
        return self._events.page(query.after, query.limit)
