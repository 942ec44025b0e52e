"""Who a reader or a decider is to a conversation: their own name, and a reviewer
``group:<name>`` for each of their verified groups (``DecideInput.groups``,
``StateQuery.groups``, ``EventsQuery.groups``, ``EventsWait.groups``: the gateway's, from
an OpenID Connect token; the CLI has none). Workflow side (pure: no I/O, no clock),
imported through the sandbox like ``gate``.

The one place a group reviewer is turned into its member: ``gate`` (reading, deciding),
``awaiting`` (what a reader may do) and ``triage`` (an edit's editor) ask it, so a member
of ``group:ops`` may do exactly what a reviewer named in the conversation may. A group is
never a person: it gets no approval link (``activities.notifications``), and a rule's
``escalate_to`` names one user (a group there is not supported: no one is that user).
"""

from __future__ import annotations

from collections.abc import Sequence

from parley.contracts import ConversationState
from parley.contracts.reviewers import names_of


def is_named(reviewers: Sequence[str], user_id: str, groups: Sequence[str]) -> bool:
    """Whether ``reviewers`` name ``user_id``, themselves or one of their groups."""
    return not names_of(user_id, groups).isdisjoint(reviewers)


def as_seen_by(state: ConversationState, user_id: str, groups: Sequence[str]) -> ConversationState:
    """The state with ``user_id`` among the reviewers when one of their groups is a
    reviewer: a group member counts as that reviewer, for this call only. The state
    itself is unchanged (a shallow copy, made only for a group member)."""
    if user_id in state.reviewers or not is_named(state.reviewers, user_id, groups):
        return state
    return state.model_copy(update={"reviewers": [*state.reviewers, user_id]})
