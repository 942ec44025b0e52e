"""Grants: what a remembered decision (``RememberedDecision``) was given for, how long
it lasts, and why one no longer holds. Pure rules and inputs both sides of the Temporal
boundary agree on (the workflow judges with them at triage, with ``workflow.now()``;
the surfaces show them); no I/O.

A decision remembered with ``Decision.remember`` is a grant: it records the tool's spec
hash (:func:`spec_hash`: its description and argument schema), the policy file's
version (:func:`rules_version`: a hash of its rules), the MCP server's ``name@version``
(``ToolSpec.server``; None for a built-in tool) and a lifetime (``granted_at``,
``expires_at``). The lifetime is the decision's ``remember_seconds``, else the policy
file's ``[grants] remember_seconds``, never more than its ``max_remember_seconds``
nor than :data:`LONGEST_GRANT_SECONDS` (:func:`lifetime`; a longer one would end past
the calendar's last day); None: the rest of the conversation. A grant whose tool, policy
file or server changed, or whose lifetime is over, no longer applies (:func:`lapse_of`):
the next matching call waits for a decision and says why.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import ConfigDict, Field

from parley.contracts.payloads import Contract

if TYPE_CHECKING:  # imported by ``tools``: none of these at import time
    from parley.contracts.policies import PolicyRule
    from parley.contracts.tools import ToolSpec


#: The longest lifetime any grant has (ten years): a decision or a policy file that asks
#: for more gets this. Longer ones would put ``expires_at`` past the last day a
#: ``datetime`` holds, and the workflow computes it.
LONGEST_GRANT_SECONDS = 10 * 365 * 24 * 3600


class GrantLimits(Contract):
    """The policy file's ``[grants]`` table: the lifetime of a remembered decision that
    names none (``remember_seconds``; unset: the rest of the conversation), and the
    longest any may ask for (``max_remember_seconds``)."""

    model_config = ConfigDict(extra="forbid")

    remember_seconds: int | None = Field(default=None, ge=1, le=LONGEST_GRANT_SECONDS)
    max_remember_seconds: int | None = Field(default=None, ge=1, le=LONGEST_GRANT_SECONDS)


class RememberedDecision(Contract):
    """A decision the user asked to remember (``Decision.remember``): a grant
    (``parley.contracts.grants``). It applies to later calls of its shape only while
    what it was given for still holds: the tool's ``spec_hash``, the policy file's
    ``policy_version``, the MCP ``server`` (``name@version``; None for a built-in tool),
    and until ``expires_at`` (None: the rest of the conversation). ``tool_call_id``, the
    call it was given on, is its id. All of them None (``granted_at`` too): remembered
    before grants recorded them, it holds as it did."""

    shape: str
    policy: Literal["auto", "deny"]
    decided_by: str
    tool_call_id: str
    tool: str | None = None
    spec_hash: str | None = None
    policy_version: str | None = None
    server: str | None = None
    granted_at: datetime | None = None
    expires_at: datetime | None = None


def lifetime(requested: int | None, limits: GrantLimits | None) -> int | None:
    """How long a grant lasts, in seconds (None: the rest of the conversation): the
    decision's own ``remember_seconds``, else the file's default, at most its maximum
    and never over :data:`LONGEST_GRANT_SECONDS`."""
    seconds = requested if requested is not None else (limits.remember_seconds if limits else None)
    cap = limits.max_remember_seconds if limits else None
    if cap is not None:
        seconds = cap if seconds is None else min(seconds, cap)
    return None if seconds is None else min(seconds, LONGEST_GRANT_SECONDS)


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spec_hash(spec: ToolSpec) -> str:
    """A digest of what a person approved a tool as: its description and argument schema."""
    return _digest({"description": spec.description, "args_schema": spec.args_schema})


def rules_version(rules: list[PolicyRule]) -> str:
    """The policy file's version: a digest of its rules as written (fields left at their
    defaults left out, so a field added to ``PolicyRule`` later changes no version)."""
    return _digest([r.model_dump(mode="json", exclude_defaults=True) for r in rules])


LapseCause = Literal["expired", "tool", "policy", "server"]


class Lapse(NamedTuple):
    """Why a grant no longer applies: its cause, and the sentence a pending call shows."""

    cause: LapseCause
    why: str


def when(at: datetime | None) -> str:
    """An instant as the surfaces write a grant's: ``2026-12-07 15:40:12 UTC``."""
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S UTC")


def lapse_of(
    grant: RememberedDecision, spec: ToolSpec, rules: list[PolicyRule], now: datetime
) -> Lapse | None:
    """Why ``grant`` does not apply to a call of ``spec`` now, or None when it does. A
    grant remembered before grants recorded what they were for (``granted_at`` None)
    holds as it did."""
    if grant.granted_at is None:
        return None
    kind = "approval" if grant.policy == "auto" else "rejection"
    asked = f"asked again: the remembered {kind} of {when(grant.granted_at)}"
    if grant.expires_at is not None and now >= grant.expires_at:
        return Lapse("expired", f"{asked} ended at {when(grant.expires_at)}")
    if grant.spec_hash is not None and grant.spec_hash != spec_hash(spec):
        return Lapse(
            "tool", f"{asked} was for another version of the tool's description or arguments"
        )
    if grant.policy_version is not None and grant.policy_version != rules_version(rules):
        return Lapse("policy", f"{asked} was given under another version of the policy file")
    if grant.server != spec.server:
        now_on = spec.server or "no MCP server"
        return Lapse("server", f"{asked} was for MCP server {grant.server}; it is now {now_on}")
    return None


class RevokeGrantInput(Contract):
    """The ``revoke_grant`` update: forget a remembered decision, named by the call it
    was given on (``RememberedDecision.tool_call_id``). Strict, like every input."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    grant_id: str = Field(min_length=1)
    #: The sender's verified groups (a reviewer group's member may revoke).
    groups: list[str] = Field(default_factory=list, max_length=64)


class GrantsQuery(Contract):
    """The ``grants`` query: the conversation's remembered decisions, for a member."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    groups: list[str] = Field(default_factory=list, max_length=64)
