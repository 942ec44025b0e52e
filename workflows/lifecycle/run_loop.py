"""The run loop: what a conversation does between its handlers, until it ends. Workflow
side (deterministic).

Between turns the loop waits until one of its steps is ready, then takes the first
ready one, in this order (:meth:`RunLoop.steps`, one table):

1. the conversation ended (the ``end`` update, a cancel) → stop; a cancel the code
   below swallowed → raise it again (:data:`CANCEL_ENDS_THE_RUN`);
2. a subagent's conversation whose task has its answer → end it, stop;
3. calls past their deadline → escalate or answer them (``deadlines``);
4. a decision that came by signal → apply it (``signalled``);
4a. a message that waits for a turn, with no decision owed → its turn (``busy``);
5. news from a subagent at work → a turn that applies it;
5a. audit entries enough for a batch beyond the kept window → archive them
    (``audit_archive``);
6. time to hand over (``handover``) → continue as new with the carried state.

The timer that wakes the loop rings at the earliest deadline or before it (kept across
turns, see ``deadlines``). A subagent's
conversation begins with its task as its one message (:meth:`RunLoop.take_task`);
:meth:`RunLoop.close` answers whatever still waits, once, and never runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from temporalio import workflow

from parley.contracts import SubagentTask
from parley.workflows.context import Records, View
from parley.workflows.lifecycle.deadlines import DEADLINE_TIMER_KEPT, Deadlines
from parley.workflows.lifecycle.followers import Followers
from parley.workflows.lifecycle.handover import Handover, build_of_this_run
from parley.workflows.lifecycle.signalled import SignalledDecisions
from parley.workflows.record.audit_archive import AuditArchiver
from parley.workflows.record.publishing import publish_status
from parley.workflows.turn.turns import TurnEngine, TurnJobs

#: A cancel request ends the run even where it was lost on the way to an ``await``: on
#: Python 3.11 ``asyncio.wait_for`` (under ``wait_condition`` with a timeout) returns a
#: condition that came true in the same activation and drops the cancel, and a turn turns
#: a cancelled activity into a failed turn. Before this patch such a run, a subagent whose
#: parent ended among them, kept waiting for ever.
CANCEL_ENDS_THE_RUN = "cancel-ends-the-run"

#: A step's action returns True when the loop should stop.
Step = tuple[Callable[[], bool], Callable[[], Awaitable[bool]]]


class Between(NamedTuple):
    """What a conversation does between turns and across runs, each built once by
    ``ConversationWorkflow``."""

    turns: TurnEngine
    handover: Handover
    deadlines: Deadlines
    signalled: SignalledDecisions
    followers: Followers
    archiver: AuditArchiver


class RunLoop:
    def __init__(self, view: View, records: Records, jobs: TurnJobs, between: Between) -> None:
        self._state, self._start, self._records = view.state, view.start, records
        self._ledger, self._jobs, self._between = records.ledger, jobs, between
        self._turns, self._deadlines = between.turns, between.deadlines
        self._cancel_left_running = False  # a history from before CANCEL_ENDS_THE_RUN

    def steps(self) -> list[Step]:
        state, idle = self._state, self._idle
        return [
            (lambda: state.ended, self._stop),
            (self._cancel_lost, self._cancel_again),
            (self._task_done, self._finish_task),
            (lambda: idle() and self._deadlines.expired() != [], self._expire),
            (lambda: idle() and state.dedup.queued_decisions != [], self._apply_signalled),
            (lambda: idle() and self._jobs.busy.next_ready(), self._next_queued),
            (lambda: idle() and self._jobs.subagents.has_news(), self._subagent_news),
            (lambda: idle() and self._between.archiver.due(), self._archive_audit),
            (self._should_continue_as_new, self._hand_over),
        ]

    async def run(self) -> None:
        steps = self.steps()
        while True:
            if workflow.patched(DEADLINE_TIMER_KEPT):
                await self._wait_with_kept_timer(steps)
            else:
                await self._wait_with_timer_per_deadline(steps)
            for ready, action in steps:
                if ready():
                    if await action():
                        return
                    break

    async def _wait_with_kept_timer(self, steps: list[Step]) -> None:
        """Until a step is ready, the kept timer rang, or a deadline came before it."""
        deadlines = self._deadlines
        deadlines.set_timer()
        await workflow.wait_condition(
            lambda: (
                any(ready() for ready, _ in steps)
                or deadlines.timer_rang()
                or deadlines.timer_behind()
            )
        )

    async def _wait_with_timer_per_deadline(self, steps: list[Step]) -> None:
        """A history from before :data:`DEADLINE_TIMER_KEPT`: a timer per wait, cancelled
        when the earliest deadline changes (a turn left calls pending, a decision cleared
        them), so that it always matches it."""
        deadline = self._deadlines.next()
        try:
            await workflow.wait_condition(
                lambda: any(ready() for ready, _ in steps) or self._deadlines.next() != deadline,
                timeout=self._deadlines.time_to_next(),
            )
        except TimeoutError:
            pass

    def _idle(self) -> bool:
        return not self._state.turn_running

    async def _stop(self) -> bool:
        return True

    def _cancel_lost(self) -> bool:
        """Temporal asked this run to cancel and the run goes on: the cancel was lost."""
        return workflow.cancellation_reason() is not None and not self._cancel_left_running

    async def _cancel_again(self) -> bool:
        if not workflow.patched(CANCEL_ENDS_THE_RUN):
            self._cancel_left_running = True  # replaying a run that went on: it still does
            return False
        raise asyncio.CancelledError("the run was cancelled")

    def _task_done(self) -> bool:
        """A subagent's conversation whose task has its answer (or failed): it ends, and
        its parent reads the last turn."""
        state = self._state
        return (
            self._start.subagent is not None
            and not state.turn_running
            and not state.pending
            and not state.dedup.queued_decisions
            and state.last_turn is not None
            and state.last_turn.status != "awaiting_approval"
        )

    async def _finish_task(self) -> bool:
        self.end("parley", {"reason": "task done"})
        return True

    def end(self, by: str, detail: dict[str, str] | None = None) -> None:
        """The conversation ends (once: audited ``ended``): from here on, validators refuse
        messages and decisions, and the loop stops at its next step."""
        if not self._state.ended:
            self._state.ended = True
            self._ledger.audit("ended", by, detail=detail)

    async def _expire(self) -> bool:
        await self._deadlines.expire_due()
        return False

    async def _apply_signalled(self) -> bool:
        await self._between.signalled.apply_next()
        return False

    async def _next_queued(self) -> bool:
        await self._jobs.busy.run_next(self._turns.run)
        return False

    async def _subagent_news(self) -> bool:
        await self._turns.run(subagent_news=True)
        return False

    async def _archive_audit(self) -> bool:
        await self._between.archiver.archive()
        return False

    def _should_continue_as_new(self) -> bool:
        state = self._state
        busy = bool(
            state.turn_running
            or state.dedup.queued_decisions
            or state.queued_messages  # their updates wait in this run
            or self._jobs.notifier.in_flight  # a notification finishes in this run
            or state.delegations.active  # its child workflows belong to this run
        )
        return self._between.handover.due(busy=busy)

    async def _hand_over(self) -> bool:
        followers, handover = self._between.followers, self._between.handover
        followers.handing_over = True
        followers.release_all()
        # A message queued meanwhile holds its update until its turn: the loop runs it.
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() or self._state.queued_messages != []
        )
        if (
            not self._state.turn_running
            and not self._state.ended
            and not self._state.queued_messages
        ):
            self._records.tally.continued_as_new()
            if handover.upgrade_due():
                handover.record_upgrade()
            # A versioned run's next run starts on the task queue's current build (the
            # same one unless a deploy made another current), then pins there. Temporal
            # refuses the option from unversioned workers.
            workflow.continue_as_new(
                self._start.model_copy(update={"carried_state": self._state}),
                memo=dict(workflow.memo()) or None,  # the instructions it holds, for the UI
                initial_versioning_behavior=(
                    workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
                    if build_of_this_run()
                    else None
                ),
            )
        followers.handing_over = False
        return False

    async def take_task(self, task: SubagentTask) -> None:
        """A subagent's conversation begins: its parent's task is its one message."""
        if task.instructions:
            self._records.transcript.add_system(task.instructions, "instructions")
        detail = {"message_id": "task", "from": task.parent_workflow_id}
        self._ledger.enter(task.task, "task", self._state.user_id, detail)
        await self._turns.run()

    def close(self) -> None:
        """The end of the conversation, once: what is pending is answered, never run."""
        if self._state.status == "ended":
            return
        self._jobs.subagents.stop("the conversation ended")
        self._jobs.busy.close()
        for call in self._records.pending.take_all():
            self._ledger.answer_unrun(call, "the conversation ended before anyone decided on it")
        self._state.status = "ended"
        publish_status(self._state)
