"""Deduplication of the client's requests, and the one place an update waits for a later
turn's answer. Workflow side (deterministic).

An update id already answered gets its first result, across continue-as-new
(``recent_results``). A decision sent by signal (``decide_signal``) waits in order in
``queued_decisions`` until the run loop applies it; one a client signalled because no
worker was there carries its update id (``DecideInput.request_id``), so the ``decide``
update of that id attaches to it. An update that waits for a later turn (a message
queued while a turn runs, ``busy``; a ``decide`` whose decision came by signal first) is
parked (:meth:`Deduplication.park`) until :meth:`Deduplication.answer` or
:meth:`Deduplication.refuse` names its id. :class:`Deduplication` is the one writer of
``ConversationState.dedup``.
"""

from __future__ import annotations

from temporalio import workflow

from parley.contracts import DecideInput, TurnResult
from parley.contracts.errors import Refusal
from parley.contracts.state import DeduplicationState

#: How many update results to keep for deduplicating client retries.
RECENT_RESULTS_KEPT = 32


class Deduplication:
    def __init__(self, dedup: DeduplicationState) -> None:
        self._dedup = dedup
        #: The ``request_id`` of the signalled decision being applied now.
        self.applying: str | None = None
        #: The updates parked in this run, and the answers that came for them.
        self._parked: set[str] = set()
        self._answers: dict[str, TurnResult | Refusal] = {}

    @staticmethod
    def update_id() -> str | None:
        info = workflow.current_update_info()
        return info.id if info else None

    def earlier(self) -> TurnResult | None:
        """The result this update id already had."""
        update_id = self.update_id()
        return self._dedup.recent_results.get(update_id) if update_id else None

    def remember(self, result: TurnResult, request_id: str | None = None) -> TurnResult:
        """Keep ``result`` under the current update's id (or ``request_id``)."""
        key = request_id or self.update_id()
        if key:
            results = self._dedup.recent_results
            results[key] = result
            while len(results) > RECENT_RESULTS_KEPT:
                del results[next(iter(results))]
        return result

    # --- decisions by signal ---------------------------------------------------------

    @property
    def queued(self) -> list[DecideInput]:
        """The signalled decisions waiting, oldest first (read only)."""
        return self._dedup.queued_decisions

    def queue(self, request: DecideInput) -> None:
        self._dedup.queued_decisions.append(request)

    def take_next(self) -> DecideInput:
        """The oldest signalled decision, leaving the queue: it is applied now."""
        return self._dedup.queued_decisions.pop(0)

    def signalled(self) -> bool:
        """Whether this update stands for a decision already sent by signal and not yet
        answered: queued, or being applied."""
        update_id = self.update_id()
        if not update_id:
            return False
        queued = {q.request_id for q in self._dedup.queued_decisions}
        return update_id == self.applying or update_id in queued

    # --- updates that wait for a later turn -------------------------------------------

    async def park(self, update_id: str | None = None) -> TurnResult:
        """Wait until a later turn answers this update (or ``update_id``): its result, or
        its refusal raised."""
        key = update_id or self.update_id()
        assert key
        self._parked.add(key)
        try:
            await workflow.wait_condition(lambda: key in self._answers)
        finally:
            self._parked.discard(key)
        answer = self._answers.pop(key)
        if isinstance(answer, Refusal):
            raise answer
        return answer

    def answer(self, update_id: str | None, result: TurnResult) -> None:
        """The turn that answers ``update_id`` rests: its result is kept for retries, and
        the update parked under that id (if any) returns it."""
        if update_id:
            self.remember(result, update_id)
            if update_id in self._parked:
                self._answers[update_id] = result

    def refuse(self, update_id: str | None, refusal: Refusal) -> None:
        """``update_id`` will not be answered by a turn: its parked update raises it."""
        if update_id and update_id in self._parked:
            self._answers[update_id] = refusal
