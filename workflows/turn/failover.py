"""Which of the worker's models a conversation's model calls use: failover and the way
back (issue 35, point 4; ``parley.contracts.failover``). Workflow side: deterministic
(``workflow.now()``, and the state continue-as-new carries).

A conversation starts on the first model ``PARLEY_MODEL`` lists, and its calls name no
model (``CallModelInput.model`` None: histories before failover read the same). When a
call or a compaction fails for good (Temporal's retries spent, or a refusal never
retried) with a :class:`FailoverOffer` in its details, the same call is made on the next
listed model not yet tried for it (in list order after the failed one, wrapping), so
each model is tried at most once per call; a failure without an offer, or with every
model tried, fails the turn as before. Each move is audited (``model_failover``: from,
to, why), sent as ``CUSTOM parley.model_failover`` and named in the turn's
``TurnResult.notice``. The conversation stays on the new model (``ModelChoice``) until
the cool-down the worker offered has passed: the first call after it goes back to the
first model, audited and sent the same way. No history recorded before this module has
an offer in a failure, so none replays a different command: no ``workflow.patched``.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from parley.contracts import ConversationState
    from parley.contracts.failover import MODEL_FAILOVER_EVENT, FailoverOffer, ModelChoice
    from parley.workflows.record.events import EventLog
    from parley.workflows.record.ledger import Ledger


class ModelFailover:
    """The conversation's model choice, its moves, and what the turn says of them."""

    def __init__(self, state: ConversationState, ledger: Ledger, events: EventLog) -> None:
        self._state, self._ledger, self._events = state, ledger, events
        self._notices: list[str] = []

    def begin_turn(self) -> None:
        self._notices = []

    @property
    def notice(self) -> str | None:
        """What this turn's moves were, for its ``TurnResult`` (None: none)."""
        return "; ".join(self._notices) or None

    def current(self, *, may_go_back: bool = True) -> str | None:
        """The model the next call uses (None: the worker's first). Once the cool-down
        has passed, the first again (only at a call's start: ``may_go_back``)."""
        choice = self._state.model_choice
        if choice is None:
            return None
        if may_go_back and workflow.now() >= choice.back_at:
            self._state.model_choice = None
            first = choice.models[0]
            self._moved(choice.model, first, "the cool-down after the failover is over")
            return first
        return choice.model

    def fail_over(self, err: ActivityError, tried: set[str]) -> str | None:
        """The model to make the failed call on next, the move recorded; None when the
        failure is the turn's (no offer, or every listed model tried for this call)."""
        cause = err.cause
        offer = FailoverOffer.of_failure(cause)
        if offer is None or offer.model not in offer.models:
            return None
        tried.add(offer.model)
        at = offer.models.index(offer.model)
        after = [*offer.models[at + 1 :], *offer.models[:at]]
        following = next((spec for spec in after if spec not in tried), None)
        if following is None:
            return None
        if following == offer.models[0]:
            self._state.model_choice = None
        else:
            back_at = workflow.now() + timedelta(seconds=offer.cooldown_seconds)
            self._state.model_choice = ModelChoice(
                models=offer.models, model=following, back_at=back_at
            )
        why = cause.message if isinstance(cause, ApplicationError) else str(cause)
        self._moved(offer.model, following, why)
        return following

    def _moved(self, source: str, target: str, why: str) -> None:
        detail = {"from": source, "to": target, "why": why}
        self._ledger.audit("model_failover", "parley", detail=detail)
        self._events.custom(MODEL_FAILOVER_EVENT, detail)
        self._notices.append(f"the model changed from {source} to {target}: {why}")
