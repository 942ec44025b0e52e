"""Decisions that come by signal (``decide_signal``): webhooks, chat-ops buttons, and a
client that found no worker. Workflow side (deterministic).

A signal is parsed at once; a malformed one, or one past :data:`QUEUED_DECISIONS_KEPT`
waiting, is recorded as refused (the audit log's ``decision_refused`` and a ``CUSTOM``
event), never dropped. The rest wait in order and are applied between turns, through
the same gate and turn as the ``decide`` update; one that no longer fits is recorded as
refused too. A decision a client signalled for want of a worker carries its update id
(``request_id``), and the ``decide`` update of that id gets its result (``dedup``).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from parley.contracts import DecideInput
from parley.contracts.errors import InvalidDecision, Refusal
from parley.workflows.context import Records, View
from parley.workflows.rules import gate
from parley.workflows.turn.turns import TurnEngine, TurnJobs

#: How many ``decide_signal`` decisions may wait for the turn in flight.
QUEUED_DECISIONS_KEPT = 16


class SignalledDecisions:
    """The decisions that come by signal; they wait in ``dedup``, their one writer."""

    def __init__(self, view: View, records: Records, turns: TurnEngine, jobs: TurnJobs) -> None:
        self._state, self._start, self._turns = view.state, view.start, turns
        self._ledger, self._events, self._dedup = records.ledger, records.events, records.dedup
        self._subagents = jobs.subagents

    def receive(self, raw: Any) -> None:
        try:
            request = gate.parse(DecideInput, raw, InvalidDecision)
        except InvalidDecision as refusal:
            decided_by = raw.get("decided_by") if isinstance(raw, dict) else None
            self.record_refused(str(decided_by or "unknown"), refusal)
            return
        if len(self._dedup.queued) >= QUEUED_DECISIONS_KEPT:
            self.record_refused(
                request.decided_by,
                InvalidDecision(
                    f"decision refused: {QUEUED_DECISIONS_KEPT} decisions already wait for "
                    "the turn in flight; send it again when the turn is done"
                ),
                request,
            )
            return
        self._dedup.queue(request)

    async def apply_next(self) -> None:
        request = self._dedup.take_next()
        self._dedup.applying = request.request_id
        try:
            reviewed = workflow.patched(gate.REMEMBER_UNDER_REVIEW)
            gate.check_decisions(self._state, request, workflow.now(), reviewed=reviewed)
            result = await self._turns.run(decisions=request)
            self._dedup.answer(request.request_id, result)  # the update of that id gets it
        except Refusal as refusal:  # stale, malformed, or an edit the rules refuse
            self._dedup.refuse(request.request_id, refusal)
            self.record_refused(request.decided_by, refusal, request)
            if self._start.subagent is not None:
                # So the parent stops waiting, and records the decision refused.
                await self._subagents.report_to_parent(refused=refusal.message)
        finally:
            self._dedup.applying = None

    def record_refused(
        self, decided_by: str, refusal: Refusal, request: DecideInput | None = None
    ) -> None:
        detail: dict[str, Any] = {"type": refusal.type, "message": refusal.message}
        if request is not None:
            detail["decisions"] = [
                d.model_dump(exclude_none=True, exclude_defaults=True) for d in request.decisions
            ]
        self._ledger.audit("decision_refused", decided_by, detail=detail)
        self._events.decision_refused(decided_by, refusal.type or "", refusal.message)
