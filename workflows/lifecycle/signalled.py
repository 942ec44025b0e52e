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

from parley.contracts import ConversationStart, ConversationState, DecideInput
from parley.contracts.errors import InvalidDecision, Refusal
from parley.workflows.record.dedup import Deduplication
from parley.workflows.record.events import EventLog
from parley.workflows.record.ledger import Ledger
from parley.workflows.rules import gate
from parley.workflows.turn.turns import TurnEngine

#: How many ``decide_signal`` decisions may wait for the turn in flight.
QUEUED_DECISIONS_KEPT = 16


class SignalledDecisions:
    def __init__(
        self,
        state: ConversationState,
        start: ConversationStart,
        ledger: Ledger,
        events: EventLog,
        turns: TurnEngine,
        results: Deduplication,
    ) -> None:
        self._state = state
        self._start = start
        self._ledger = ledger
        self._events = events
        self._turns = turns
        self._results = results

    def receive(self, raw: Any) -> None:
        try:
            request = gate.parse(DecideInput, raw, InvalidDecision)
        except InvalidDecision as refusal:
            decided_by = raw.get("decided_by") if isinstance(raw, dict) else None
            self.record_refused(str(decided_by or "unknown"), refusal)
            return
        if len(self._state.dedup.queued_decisions) >= QUEUED_DECISIONS_KEPT:
            self.record_refused(
                request.decided_by,
                InvalidDecision(
                    f"decision refused: {QUEUED_DECISIONS_KEPT} decisions already wait for "
                    "the turn in flight; send it again when the turn is done"
                ),
                request,
            )
            return
        self._state.dedup.queued_decisions.append(request)

    async def apply_next(self) -> None:
        request = self._state.dedup.queued_decisions.pop(0)
        self._results.applying = request.request_id
        try:
            gate.check_decisions(self._state, request, workflow.now())
            result = await self._turns.run(decisions=request)
            if request.request_id:  # the update of that id gets this result
                self._results.remember(result, request.request_id)
        except Refusal as refusal:  # stale, malformed, or an edit the rules refuse
            self._results.refused(request.request_id, refusal)
            self.record_refused(request.decided_by, refusal, request)
            if self._start.subagent is not None:
                # So the parent stops waiting, and records the decision refused.
                await self._turns.subagents.report_to_parent(refused=refusal.message)
        finally:
            self._results.applying = None

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
