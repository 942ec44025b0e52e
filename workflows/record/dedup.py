"""Deduplication of the client's requests: an update id already answered gets its first
result, across continue-as-new; a decision the client sent by signal because no worker
was there (``DecideInput.request_id``) answers the ``decide`` update of the same id once
it is applied, so running the same command again attaches to it. Workflow side.
"""

from __future__ import annotations

from temporalio import workflow

from parley.contracts import ConversationState, TurnResult
from parley.contracts.errors import Refusal

#: How many update results to keep for deduplicating client retries.
RECENT_RESULTS_KEPT = 32
#: How many refusals of signalled decisions to keep (this run only) for their updates.
REFUSALS_KEPT = 16


class Deduplication:
    def __init__(self, state: ConversationState) -> None:
        self._state = state
        #: The ``request_id`` of the signalled decision being applied now.
        self.applying: str | None = None
        self._refused: dict[str, Refusal] = {}

    @staticmethod
    def _update_id() -> str | None:
        info = workflow.current_update_info()
        return info.id if info else None

    def earlier(self) -> TurnResult | None:
        """The result this update id already had."""
        update_id = self._update_id()
        return self._state.dedup.recent_results.get(update_id) if update_id else None

    def remember(self, result: TurnResult, request_id: str | None = None) -> TurnResult:
        """Keep ``result`` under the current update's id (or ``request_id``)."""
        key = request_id or self._update_id()
        if key:
            self._state.dedup.recent_results[key] = result
            while len(self._state.dedup.recent_results) > RECENT_RESULTS_KEPT:
                del self._state.dedup.recent_results[next(iter(self._state.dedup.recent_results))]
        return result

    def refused(self, request_id: str | None, refusal: Refusal) -> None:
        if request_id:
            self._refused[request_id] = refusal
            while len(self._refused) > REFUSALS_KEPT:
                del self._refused[next(iter(self._refused))]

    def signalled(self) -> bool:
        """Whether this update stands for a decision already sent by signal and not yet
        answered: queued, or being applied."""
        update_id = self._update_id()
        if not update_id:
            return False
        queued = {q.request_id for q in self._state.dedup.queued_decisions}
        return update_id == self.applying or update_id in queued

    async def result_of_signal(self) -> TurnResult:
        """Wait until the signalled decision of this update's id is applied; its result,
        or its refusal raised."""
        update_id = self._update_id()
        assert update_id
        await workflow.wait_condition(
            lambda: update_id in self._state.dedup.recent_results or update_id in self._refused
        )
        if update_id in self._refused:
            raise self._refused[update_id]
        return self._state.dedup.recent_results[update_id]
