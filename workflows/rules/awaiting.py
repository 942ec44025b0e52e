"""Who each pending call waits for, and what a given reader may do about it: the
``Awaiting`` views of the ``state`` query's snapshot and the approvers a notification
sends approve links to. Workflow side (deterministic: pure functions of the state).

Computed from the gate's own checks (``gate.approve_refusals``, ``gate.is_member``),
never a copy of its rules: a surface (the page's buttons, a signed link, the CLI's
hint) is offered to someone only when the gate would take their decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from parley.contracts import Awaiting, ConversationState, PendingCall
from parley.workflows.rules import gate
from parley.workflows.rules.membership import as_seen_by


def escalated_to(call: PendingCall) -> str | None:
    """The person ``call`` was escalated to, once it was."""
    timeout = call.on_timeout
    return timeout.escalate_to if timeout is not None and timeout.escalated else None


def escalated_people(calls: Sequence[PendingCall]) -> list[str]:
    """Everyone ``calls`` were escalated to, sorted (``ParleyEscalatedTo``)."""
    return sorted({person for call in calls if (person := escalated_to(call))})


def may_decide(state: ConversationState, call: PendingCall, user_id: str) -> bool:
    """Whether ``user_id`` may answer ``call`` at all (a member; or the person it was
    escalated to), as ``gate.check_decider`` lets them."""
    return gate.is_member(state, user_id) or escalated_to(call) == user_id


def may_approve(state: ConversationState, call: PendingCall, user_id: str) -> bool:
    return may_decide(state, call, user_id) and not gate.approve_refusals(state, call, user_id)


def approvers(state: ConversationState, call: PendingCall) -> list[str]:
    """Everyone whose approve of ``call`` the gate would take now, in a stable order:
    the owner, the reviewers, the person it was escalated to."""
    people = [state.user_id, *state.reviewers, escalated_to(call) or state.user_id]
    return [p for i, p in enumerate(people) if p not in people[:i] and may_approve(state, call, p)]


def either(names: list[str]) -> str:
    """ "bob", "bob or carol", "bob, carol or dave"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def awaiting(
    state: ConversationState, call: PendingCall, reader: str, groups: Sequence[str] = ()
) -> Awaiting:
    """``call`` as ``reader`` sees it: who it waits for (a reviewer group by its name,
    ``group:ops``), and whether they may approve or decide it (a member of a reviewer
    group, with ``groups``, as that reviewer)."""
    who = approvers(state, call)
    seen = as_seen_by(state, reader, groups)
    left = max(1, call.approvals_needed - len(call.approvals))
    if not who:
        text = (
            "no one may approve it: it needs a reviewer other than the requester, and "
            "this conversation has none; reject it, answer it, or let it expire"
        )
    elif call.reviewer_rule:
        text = f"waiting for {left} more reviewer{'s' if left > 1 else ''}: {either(who)}"
    else:
        text = f"waiting for a decision by {either(who)}"
    return Awaiting(
        tool_call_id=call.tool_call_id,
        approvers=who,
        approvals_left=left,
        text=text,
        may_approve=may_approve(seen, call, reader),
        may_decide=may_decide(seen, call, reader),
    )


def awaiting_all(
    state: ConversationState, calls: list[PendingCall], reader: str, groups: Sequence[str] = ()
) -> list[Awaiting]:
    return [awaiting(state, call, reader, groups) for call in calls]
