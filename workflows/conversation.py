"""ConversationWorkflow: one durable conversation with a confirmation gate. Workflow side.

One workflow per conversation (id ``conversation-<session_id>``), started by
update-with-start on the first message. The user talks to it through updates:

- ``send_message`` runs a turn: the model proposes, ``auto`` tools run, ``confirm`` tools
  become pending, and the update returns a ``TurnResult`` when the turn comes to rest;
- ``decide`` answers every pending call at once (approve, edit, reject, respond) and
  returns the ``TurnResult`` of the turn it resumes;
- ``end`` closes the conversation once the turn in flight is done;
- ``rewind`` keeps the first N messages and goes on in a new run (``rewind``: forks too);
- ``revoke_grant`` forgets a remembered decision (``grants``): its shape's next call asks;
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

This module holds the conversation's context and its handlers. ``__init__`` builds every
job once (``context``: the read-only ``View`` and the ``Records``, one writer per part of
the state) and hands each only what it uses; every handler begins with the same
prologue (``intake``: counted toward the run's limits, parsed strictly, its sender
checked, a retried update answered once). The rest is in one module per job: ``gate``
(the checks that validators and handlers make), ``dedup`` (results by update id, and
updates parked until a later turn answers them), ``run_loop`` (between turns, one table
of steps), ``turns`` (the turn engine), ``triage`` (one proposal's verdict),
``decisions``, ``signalled``, ``subagents``, ``notifying``, ``followers``, ``deadlines``,
``handover``, ``busy`` (messages that come while a turn runs: reject, enqueue or
interrupt), ``ledger`` (the one place a call is answered and a message enters; the
bounded state and its pages), ``transcript``, ``publishing`` (what the Temporal UI
shows) and ``events`` (the AG-UI event log). Side effects live in activities, called by
name; these modules import only ``parley`` contracts, passed through the sandbox.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        STREAM_DELTA_SIGNAL,
        ConversationSnapshot,
        ConversationStart,
        DecideInput,
        EndInput,
        EventPage,
        EventsQuery,
        EventsWait,
        RevertInput,
        SendMessageInput,
        StateQuery,
        StreamDelta,
        SubagentReport,
        TurnResult,
        UndoInput,
        UndoResult,
    )
    from parley.contracts.busy import WhileBusy
    from parley.contracts.conversation import RememberedDecision, RewindInput
    from parley.contracts.errors import (
        ConversationEnded,
        ConversationHandingOver,
        InvalidDecision,
        InvalidMessage,
    )
    from parley.contracts.grants import RevokeGrantInput
    from parley.contracts.names import (
        CONVERSATION_WORKFLOW,
        DECIDE_SIGNAL,
        SUBAGENT_REPORT_SIGNAL,
        SUBAGENT_WINDOW_SIGNAL,
        UNDO_SIGNAL,
    )
    from parley.contracts.undo import SubagentWindow
    from parley.workflows import intake
    from parley.workflows.context import Records, View
    from parley.workflows.lifecycle.deadlines import Deadlines
    from parley.workflows.lifecycle.followers import Followers
    from parley.workflows.lifecycle.handover import Handover
    from parley.workflows.lifecycle.rewind import Rewinder, first_state
    from parley.workflows.lifecycle.run_loop import Between, RunLoop
    from parley.workflows.lifecycle.signalled import SignalledDecisions
    from parley.workflows.record.audit_archive import AuditArchiver
    from parley.workflows.record.publishing import publish_owner, publish_status
    from parley.workflows.rules import gate
    from parley.workflows.rules.awaiting import awaiting_all
    from parley.workflows.turn.busy import Busy
    from parley.workflows.turn.decisions import DecisionJobs, Decisions
    from parley.workflows.turn.execution import ToolRunner
    from parley.workflows.turn.failover import ModelFailover
    from parley.workflows.turn.front_end import FrontEnd
    from parley.workflows.turn.grants import Grants
    from parley.workflows.turn.instructions import Instructions, check_added, take_added
    from parley.workflows.turn.judging import Judge
    from parley.workflows.turn.model_calls import ModelCaller
    from parley.workflows.turn.notifying import Notifier
    from parley.workflows.turn.previews import Previews
    from parley.workflows.turn.proposals import Proposals
    from parley.workflows.turn.reverts import Reverts
    from parley.workflows.turn.spending import SpendGate
    from parley.workflows.turn.streaming import ReplyStream
    from parley.workflows.turn.subagents import Subagents
    from parley.workflows.turn.turns import TurnEngine, TurnJobs
    from parley.workflows.turn.undo import UndoWindow
    from parley.workflows.turn.usage import UsageMeter


# Pinned by the versioned worker (``parley.worker.wiring.deployment_config``).
@workflow.defn(name=CONVERSATION_WORKFLOW)
class ConversationWorkflow:
    @workflow.init
    def __init__(self, start: ConversationStart) -> None:
        """The conversation's context: every job built once, here."""
        self._start = start
        self._state = state = start.carried_state or first_state(start)
        view = View(state, start)
        self._records = records = Records.of(state)
        ledger, events = records.ledger, records.events
        stream, front_end = ReplyStream(events), FrontEnd(state, ledger)
        usage, failover = UsageMeter(state, events), ModelFailover(state, ledger, events)
        subagents, spend = Subagents(view, records), SpendGate(view, records)
        tools, previews = ToolRunner(view, records, subagents), Previews(view, records)
        self._undo = undo = UndoWindow(view, records)
        notifier = Notifier(view, ledger)
        judge = Judge(view, records, tools, undo, notifier, usage)
        self._jobs = jobs = TurnJobs(
            front_end=front_end,
            busy=Busy(view, records, stream, front_end),
            usage=usage,
            failover=failover,
            model=ModelCaller(ledger, events, usage, failover),
            stream=stream,
            instructions=Instructions(state, start, ledger),  # the system message
            notifier=notifier,
            subagents=subagents,
            spend=spend,
            decisions=Decisions(
                view, records, DecisionJobs(tools, spend, subagents, previews, undo, judge)
            ),
            proposals=Proposals(view, records, tools, front_end, previews, undo, judge),
            reverts=Reverts(view, records),
        )
        self._turns = turns = TurnEngine(view, records, jobs)
        self._handover = handover = Handover(state, start, ledger)
        self._followers = Followers(state, events)
        self._signalled = SignalledDecisions(view, records, turns, jobs)
        between = Between(
            turns=turns,
            handover=handover,
            deadlines=Deadlines(view, records, turns, jobs),
            signalled=self._signalled,
            followers=self._followers,
            archiver=AuditArchiver(state.audit, ledger.archived),
        )
        self._loop = RunLoop(view, records, jobs, between)
        self._rewinder = Rewinder(view, records, front_end, handover)
        self._intake = intake.Intake(state, handover, records.dedup)
        self._grants = Grants(view, records)

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
            self._loop.end("parley", {"reason": "cancelled"})
            self._loop.close()
            raise
        self._followers.release_all()
        self._jobs.notifier.cancel_all()  # the conversation ended: nobody need be told
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._loop.close()
        ledger = self._records.ledger
        if start.subagent is not None:
            # What the parent reads (``last_turn``), not pages it never shows.
            return ledger.snapshot(
                StateQuery(user_id=self._state.user_id, transcript_limit=0, audit_limit=0)
            )
        return ledger.snapshot(StateQuery(user_id=self._state.user_id))

    # --- updates (each begins with ``intake``'s prologue) ------------------------------

    @workflow.update
    @intake.update(intake.SEND)
    async def send_message(self, message: SendMessageInput) -> TurnResult:
        if self._check_message(message):  # again: two updates may pass validation together
            return await self._jobs.busy.wait_for_turn(message, self._while_busy(message))
        self._records.tally.turn()
        turn = self._turns.run(client=message, opening=lambda: self._open_turn(message))
        return self._records.dedup.remember(await turn)

    def _open_turn(self, message: SendMessageInput) -> None:
        """The message enters the conversation, once its run has started: the front
        end's results for its tools' calls (or their answer as never run), its text."""
        self._jobs.front_end.take(message)
        take_added(self._state, self._records.ledger, message)  # the starting message's
        if message.text.strip():
            detail = {"message_id": message.message_id}
            self._records.ledger.enter(message.text, message.message_id, message.user_id, detail)

    @send_message.validator
    @intake.validator(intake.SEND)
    def _validate_send_message(self, message: SendMessageInput) -> None:
        if not self._records.dedup.earlier() and self._check_message(message):
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
    @intake.update(intake.DECIDE)
    async def decide(self, decision: DecideInput) -> TurnResult:
        dedup = self._records.dedup
        if dedup.signalled():  # sent by signal first, when no worker was there
            return await dedup.park()
        reviewed = workflow.patched(gate.REMEMBER_UNDER_REVIEW)
        self._check_decisions(decision, reviewed=reviewed)  # again: two may race
        return dedup.remember(await self._turns.run(decisions=decision))

    @decide.validator
    @intake.validator(intake.DECIDE)
    def _validate_decide(self, decision: DecideInput) -> None:
        if not self._records.dedup.earlier() and not self._records.dedup.signalled():
            self._check_decisions(decision)

    def _check_decisions(self, decision: DecideInput, *, reviewed: bool = True) -> None:
        gate.check_decisions(self._state, decision, workflow.now(), reviewed=reviewed)
        limit = self._start.max_message_bytes
        gate.check_client_run(self._state, decision, limit, InvalidDecision)

    @workflow.update
    @intake.update(intake.END)
    async def end(self, request: EndInput) -> ConversationSnapshot:
        """End the conversation once the turn in flight (if any) is done; pending calls
        are answered ``expired`` and never run. Owner-checked, like every other update.
        Returns the ended conversation's latest page."""
        self._loop.end(request.user_id)  # from here on, validators refuse sends and decisions
        self._undo.undo(UndoInput(user_id=request.user_id), every=True)  # nothing runs now
        await workflow.wait_condition(lambda: not self._state.turn_running)
        self._loop.close()
        return self._records.ledger.snapshot(StateQuery(user_id=request.user_id))

    @end.validator
    @intake.validator(intake.END)
    def _validate_end(self, request: EndInput) -> None:
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")

    @workflow.update
    @intake.update(intake.UNDO)
    async def undo(self, request: UndoInput) -> UndoResult:
        """Take back approved calls still in their undo window (``undo``): none of them
        runs, and the model is told. Taken while their turn waits; a subagent's are
        passed on to its conversation."""
        return await self._undo.take_back(request)

    @undo.validator
    @intake.validator(intake.UNDO)
    def _validate_undo(self, request: UndoInput) -> None:
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")
        self._undo.check(request)

    @workflow.update
    @intake.update(intake.REVERT)
    async def revert(self, request: RevertInput) -> TurnResult:
        """Propose the inverse of a call that ran (``reverts``): refused, saying why, if
        it has none; else a turn in which the gate sorts it like any call."""
        self._jobs.reverts.check(request)  # again: a turn may have started since
        self._records.tally.turn()
        return await self._turns.run(revert=request)

    @revert.validator
    @intake.validator(intake.REVERT)
    def _validate_revert(self, request: RevertInput) -> None:
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")
        self._jobs.reverts.check(request)

    @workflow.update
    @intake.update(intake.REVOKE_GRANT)
    def revoke_grant(self, request: RevokeGrantInput) -> RememberedDecision:
        """Forget a remembered decision (``grants``): the next call of its shape asks
        again. Audited ``grant_revoked``; returns the grant revoked."""
        return self._grants.revoke(request)

    @revoke_grant.validator
    @intake.validator(intake.REVOKE_GRANT)
    def _validate_revoke_grant(self, request: RevokeGrantInput) -> None:
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")
        self._grants.check(request)

    @workflow.update
    @intake.update(intake.REWIND)
    def rewind(self, request: RewindInput) -> ConversationSnapshot:
        """Keep the first N messages; the run then continues as new (``rewind``)."""
        return self._rewinder.rewind(request)

    @rewind.validator
    @intake.validator(intake.REWIND)
    def _validate_rewind(self, request: RewindInput) -> None:
        self._rewinder.check(request)

    @workflow.update
    @intake.update(intake.WAIT_FOR_EVENTS)
    async def wait_for_events(self, request: EventsWait) -> int:
        """Wait until the event log has an event after ``after`` (``followers``); return
        the latest offset. Costs two small history events per wake-up; the events are
        read with the query."""
        return await self._followers.wait(request.after)

    @wait_for_events.validator
    @intake.validator(intake.WAIT_FOR_EVENTS)
    def _validate_wait_for_events(self, request: EventsWait) -> None:
        if self._state.ended:
            raise ConversationEnded("this conversation has ended")
        if self._followers.handing_over or self._handover.followers_refused:
            raise ConversationHandingOver(
                "this conversation is moving to a new run; wait again in a moment"
            )

    # --- signals (each counted by ``intake``) -------------------------------------------

    @workflow.signal
    @intake.signal()
    def upgrade(self) -> None:
        """Wake up: the run loop then sees whether a newer worker build is current and,
        if so, moves to it between turns. Temporal tells a waiting workflow nothing
        until its next workflow task, which this signal makes."""

    @workflow.signal(name=DECIDE_SIGNAL)
    @intake.signal()
    def decide_signal(self, decision: Any) -> None:
        """The ``decide`` update's decision, fire-and-forget (``signalled``). Applied
        between turns; refused ones are recorded, never dropped."""
        self._signalled.receive(decision)

    @workflow.signal(name=STREAM_DELTA_SIGNAL)
    @intake.signal(stream=True)
    def stream_delta(self, delta: StreamDelta) -> None:
        """A batch of the reply in flight, from ``call_model`` (``streaming``). Counted
        with the run's other signals: Temporal's limit counts every one."""
        self._jobs.stream.add(delta)

    @workflow.signal(name=SUBAGENT_REPORT_SIGNAL)
    @intake.signal()
    def subagent_report(self, report: SubagentReport) -> None:
        """A subagent at work came to rest waiting for decisions: applied by the turn
        that waits for it, or between turns (``subagents``)."""
        self._jobs.subagents.receive(report)

    @workflow.signal(name=SUBAGENT_WINDOW_SIGNAL)
    @intake.signal()
    def subagent_window(self, window: SubagentWindow) -> None:
        """A subagent's calls in their undo window, listed here to be undone from here
        (``undo``)."""
        self._undo.mirror(window)

    @workflow.signal(name=UNDO_SIGNAL)
    @intake.signal()
    def undo_signal(self, request: UndoInput) -> None:
        """In a subagent's conversation: an undo its parent passed on (``undo``)."""
        self._undo.undo_passed_on(request)

    # --- queries ----------------------------------------------------------------------

    @workflow.query
    def state(self, query: StateQuery) -> ConversationSnapshot:
        escalated = gate.check_reader(self._state, query.user_id, query.groups)
        ledger = self._records.ledger
        if escalated is not None:  # the person a call was escalated to: that call only
            snapshot = ledger.escalated_snapshot(escalated)
        else:
            snapshot = ledger.snapshot(query)
            snapshot.revertible = self._jobs.reverts.revertible()
        # Who each call waits for, and what this reader (with their groups) may do, by
        # the gate's own checks.
        snapshot.awaiting = awaiting_all(self._state, snapshot.pending, query.user_id, query.groups)
        return snapshot

    @workflow.query
    def events(self, query: EventsQuery) -> EventPage:
        gate.check_member(self._state, query.user_id, query.groups)
        return self._records.events.page(query.after, query.limit)
