"""Failover between the models ``PARLEY_MODEL`` lists (issue 35, point 4): the list, what
a failed model call offers the workflow, and which model a conversation is on. Pure:
both sides of the Temporal boundary read it (the worker parses the list and the
cool-down; the workflow decides, by ``workflow.now()``, which model each call uses).

``PARLEY_MODEL=anthropic:claude-sonnet-4-5,openai:gpt-4o`` lists models in order of
preference. A call that fails persistently on one (its retries spent, or a refusal that
is the provider's, not the request's: :data:`FAILOVER_STATUSES`) carries a
:class:`FailoverOffer` in its failure's details; the workflow then makes the call again
on the next model, audits ``model_failover`` and sends ``CUSTOM parley.model_failover``,
and goes back to the first once ``PARLEY_MODEL_FAILOVER_COOLDOWN_SECONDS`` have passed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import Field

from parley.contracts.payloads import Contract

#: Where the worker reads the cool-down (the worker, not ``Settings``: see the docs).
COOLDOWN_VARIABLE = "PARLEY_MODEL_FAILOVER_COOLDOWN_SECONDS"
DEFAULT_COOLDOWN_SECONDS = 300.0
#: The key of a failed call's details that holds its :class:`FailoverOffer`.
FAILOVER_DETAIL = "parley_failover"
#: The ``CUSTOM`` event of a move from one model to another.
MODEL_FAILOVER_EVENT = "parley.model_failover"
#: A refusal with one of these statuses is the provider's (a key refused or revoked,
#: no access to the model, the model gone, the account's quota spent: HTTP 429
#: ``insufficient_quota``), so the next model may answer; any other refusal (400, 409,
#: 413, 422: the request's fault, a context overflow that compacts instead, a reply
#: past Parley's bound) fails the turn as it always did.
FAILOVER_STATUSES = frozenset({401, 402, 403, 404, 429})


def model_specs(value: str) -> list[str]:
    """``"anthropic:a, openai:b"`` → ``["anthropic:a", "openai:b"]``: the models in
    order of preference (a single spec is a list of one)."""
    return [spec.strip() for spec in value.split(",") if spec.strip()]


def cooldown_seconds(env: Mapping[str, str]) -> float:
    """``PARLEY_MODEL_FAILOVER_COOLDOWN_SECONDS``: how long a conversation stays on a
    later model before it tries the first again (0 to 7 days; default 300)."""
    raw = env.get(COOLDOWN_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_COOLDOWN_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= 7 * 86400:
        raise ValueError(
            f"{COOLDOWN_VARIABLE}={raw!r} is not a number of seconds from 0 to 604800 (e.g. 300)"
        )
    return value


class FailoverOffer(Contract):
    """In a failed model call's details when the worker lists more than one model and
    the failure is one that fails over: which model failed, the worker's list, and
    how long a conversation that moves on stays away from the first."""

    model: str
    models: list[str]
    cooldown_seconds: float = DEFAULT_COOLDOWN_SECONDS

    @classmethod
    def of_failure(cls, failure: Any) -> FailoverOffer | None:
        for detail in getattr(failure, "details", None) or ():
            if isinstance(detail, dict) and isinstance(detail.get(FAILOVER_DETAIL), dict):
                return cls.model_validate(detail[FAILOVER_DETAIL])
        return None

    def detail(self) -> dict[str, Any]:
        return {FAILOVER_DETAIL: self.model_dump(mode="json")}


class ModelChoice(Contract):
    """The model a conversation's calls use, when it is not the worker's first
    (``ConversationState.model_choice``; None: the first). Carried across
    continue-as-new."""

    #: The worker's list when the conversation moved (``FailoverOffer.models``).
    models: list[str] = Field(default_factory=list)
    #: The model the calls use now (a spec of ``models``).
    model: str
    #: When the conversation goes back to the first model (``workflow.now()``).
    back_at: datetime
