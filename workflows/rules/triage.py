"""Triage: what happens to one proposed call (the model's, or a person's edit). Workflow
side, pure: no I/O and no clock (the caller passes ``now``), unit-tested without a
server in ``tests/test_triage.py``, like ``gate``.

A proposal's arguments are canonical when they reach here (``ParleyTool.canonical_args``,
run by the worker when the model proposed them or a person edited them), so the rules,
a remembered decision, the approval card and the audit log all judge the arguments
that will run. The answer is one of:

- :class:`Refuse`: unknown tool, arguments the schema refuses, or a ``deny`` (a rule or
  a remembered rejection); the model reads why;
- :class:`Run`: ``auto`` (the tool, a rule or a remembered approval), or an edit whose
  new arguments the editor may approve themselves;
- :class:`Wait`: a :class:`PendingCall` that waits for a decision, naming the rule that
  made it wait (``PendingCall.rule``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from parley.contracts import (
    OnTimeout,
    PendingCall,
    PolicyOutcome,
    RememberedDecision,
    ToolCall,
    ToolCatalogue,
    ToolSpec,
    args_hash,
    call_shape,
    evaluate,
)
from parley.contracts.errors import ErrorType
from parley.contracts.grants import Lapse, lapse_of
from parley.workflows.rules.membership import is_named


class Refuse(NamedTuple):
    error_type: str
    message: str
    outcome: PolicyOutcome | None = None


class Run(NamedTuple):
    outcome: PolicyOutcome
    remembered: RememberedDecision | None = None
    #: For an edit the editor approves: a remembered decision of its shape that no
    #: longer holds, and why; the caller forgets it, as for a call that waits.
    lapsed: tuple[RememberedDecision, Lapse] | None = None


class Wait(NamedTuple):
    call: PendingCall
    outcome: PolicyOutcome
    #: A remembered decision of this call's shape that no longer holds, and why: the
    #: call waits instead (``parley.contracts.grants``), and the caller forgets it.
    lapsed: tuple[RememberedDecision, Lapse] | None = None


Verdict = Refuse | Run | Wait


class Proposal(NamedTuple):
    """What triage needs besides the call: the conversation's catalogue, remembered
    decisions and people, the instant, and the default wait."""

    catalogue: ToolCatalogue
    remembered: list[RememberedDecision]
    now: datetime
    expiry_seconds: float
    owner: str
    reviewers: list[str]


def triage(
    call: ToolCall,
    context: Proposal,
    *,
    edited_by: str | None = None,
    groups: Sequence[str] = (),
) -> Verdict:
    """The verdict on ``call`` (canonical arguments). With ``edited_by``, the call is a
    person's edit of a pending call: a rule that needs a reviewer lets it run only if
    that person is a reviewer other than the owner (by name, or a member of a reviewer
    group: their verified ``groups``, ``membership``); a ``confirm`` lets it run (the edit
    is the editor's approval); a quorum (``approvals`` > 1) makes it wait, its count
    started again; ``deny`` refuses it."""
    catalogue = context.catalogue
    spec = catalogue.get(call.name)
    if spec is None:
        known = ", ".join(t.name for t in catalogue.tools) or "none"
        return Refuse(ErrorType.TOOL_INPUT, f"unknown tool {call.name!r}; available tools: {known}")
    problem = spec.args_error(call.args)
    if problem:
        return Refuse(ErrorType.TOOL_INPUT, f"invalid arguments for {call.name}: {problem}")
    outcome, remembered, lapsed = policy_of(spec, call, context)
    if outcome.policy == "deny":
        why = f" (rule `{outcome.rule}`)" if outcome.rule else ""
        if remembered is not None:
            why = " (a rejection remembered in this conversation)"
        return Refuse(
            ErrorType.TOOL_PERMISSION,
            f"{call.name} is not allowed in this conversation{why}",
            outcome,
        )
    if outcome.policy == "auto":
        return Run(outcome, remembered)
    if (
        edited_by is not None
        and outcome.approvals <= 1  # a quorum's edit is a new proposal: counted again
        and not (outcome.requires_reviewer and not is_other_reviewer(edited_by, context, groups))
    ):
        return Run(outcome, lapsed=lapsed)
    on_timeout = on_timeout_of(outcome, context.expiry_seconds)
    seconds = on_timeout.seconds if on_timeout else context.expiry_seconds
    pending = PendingCall(
        tool_call_id=call.tool_call_id,
        name=call.name,
        args=call.args,
        args_hash=args_hash(call.args),
        description=spec.description,
        expires_at=context.now + timedelta(seconds=seconds),
        reason=_reason(outcome, lapsed),
        rule=outcome.rule,
        on_timeout=on_timeout,
        reviewer_rule=outcome.rule if outcome.requires_reviewer else None,
        edited_by=edited_by,
        approvals_needed=outcome.approvals,
        proposed_at=context.now,
        undo_seconds=outcome.undo_seconds,
    )
    return Wait(pending, outcome, lapsed)


def is_other_reviewer(user: str, context: Proposal, groups: Sequence[str] = ()) -> bool:
    """A reviewer of the conversation who is not its owner (the one who asked): named,
    or a member of a reviewer ``group:<name>`` by their verified ``groups``."""
    return user != context.owner and is_named(context.reviewers, user, groups)


def policy_of(
    spec: ToolSpec, call: ToolCall, context: Proposal
) -> tuple[PolicyOutcome, RememberedDecision | None, tuple[RememberedDecision, Lapse] | None]:
    """The rules first (the first match decides); a call that would wait for a
    decision then takes a remembered decision for its shape, if there is one and it
    still holds (its tool, policy file, server and lifetime: ``lapse_of``); one that
    no longer does is returned third, with why."""
    outcome = evaluate(context.catalogue.rules, call.name, call.args, context.now, spec.policy)
    if outcome.policy == "confirm" and not outcome.requires_reviewer:
        shape = call_shape(call.name, call.args)
        for remembered in reversed(context.remembered):
            if remembered.shape == shape:
                lapse = lapse_of(remembered, spec, context.catalogue.rules, context.now)
                if lapse is not None:
                    return outcome, None, (remembered, lapse)
                # A remembered approval approves: the rule's undo window still holds.
                window = outcome.undo_seconds if remembered.policy == "auto" else None
                taken = PolicyOutcome(
                    policy=remembered.policy, remembered=True, undo_seconds=window
                )
                return taken, remembered, None
    return outcome, None, None


def _reason(outcome: PolicyOutcome, lapsed: tuple[RememberedDecision, Lapse] | None) -> str | None:
    """Why a call waits, when something says: a remembered decision that no longer
    holds, and the rule that matched."""
    said = [lapsed[1].why] if lapsed is not None else []
    if outcome.rule:
        said.append(outcome.reason())
    return "; ".join(said) or None


def on_timeout_of(outcome: PolicyOutcome, default_seconds: float) -> OnTimeout | None:
    """What a matched rule says of a call that waits too long; None: the default."""
    if outcome.rule is None or (outcome.timeout_seconds is None and outcome.on_timeout == "expire"):
        return None
    return OnTimeout(
        action=outcome.on_timeout,
        seconds=outcome.timeout_seconds or default_seconds,
        reason=outcome.timeout_reason,
        escalate_to=outcome.escalate_to,
    )


def invalid_call_refusal(broken: Any) -> str:
    """What the model reads of an invalid call: the tool's own words when the worker
    refused arguments it parsed (``call_model``'s canonical form), else why they could
    not be parsed."""
    try:
        parsed = json.loads(broken["args"] or "")
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return str(broken["error"])
    return f"the arguments of {broken['name']} could not be parsed: {broken['error']}"
