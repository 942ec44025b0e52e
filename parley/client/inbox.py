"""One inbox: every call waiting on a user, across conversations, and a batch decision
on identical ones. Client side (never imported by workflows).

``read_inbox`` needs no worker, like ``parley list``: Temporal's visibility names the
open conversations that await a decision and that the user owns, reviews (a reviewer
group of theirs too) or had a call escalated to (``visibility.awaiting_query``); each
one's history
gives its calls: the latest turn result an update returned (the turn that left them
waiting), kept only when its calls' tools are the ones ``ParleyPendingTools`` says
wait now, escalated to whom ``ParleyEscalatedTo`` names. Who may do what with each
call is the gate's own rule
(``workflows.rules.awaiting``), applied to those attributes: a call is in the inbox when
the user may decide it. When the history does not tell (the run handed over to a new
one while the calls waited; a timer expired, escalated or decided calls since), a state
query reads them, if a worker runs; if none does, the conversation is listed in
``Inbox.unread`` with why, never dropped.

``decide_like`` answers one inbox call and every other inbox call of the same tool with
the same canonical arguments (``PendingCall.args_hash``): one ``decide`` update per
conversation, each naming its calls with the arguments seen (a call whose arguments
changed since is refused, never decided), so each call gets its own decision, audit
entry and result. A call of the same tool whose arguments differ is never included.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field
from temporalio.client import WorkflowExecution
from temporalio.service import RPCError

from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused, checked_user, checked_workflow_id
from parley.client.visibility import awaiting_query, concerns, latest_turn
from parley.contracts import (
    PARLEY_ESCALATED_TO,
    PARLEY_PENDING_TOOLS,
    PARLEY_REVIEWERS,
    PARLEY_USER,
    WORKFLOW_ID_PREFIX,
    Awaiting,
    ConversationState,
    Decision,
    PendingCall,
    StateQuery,
    TurnResult,
)
from parley.contracts.errors import ErrorType
from parley.workflows.rules.awaiting import awaiting, escalated_people

#: The actions a batch decision takes: the same answer to identical calls.
BatchAction = Literal["approve", "reject"]
#: The rule a call's reason names (calls recorded before ``PendingCall.rule``).
RULE_IN_REASON = re.compile(r"rule `([^`]+)`")


class InboxCall(BaseModel):
    """One call waiting on the reader, with its conversation."""

    session_id: str
    #: The conversation's owner (who asked).
    owner: str
    call: PendingCall
    #: The policy rule that made it wait (``rule_of``); None: the tool's own policy.
    rule: str | None = None
    #: When it began to wait (its proposal; else when its turn came to rest).
    waiting_since: datetime
    #: Who it waits for, and whether the reader's approve would be taken.
    awaiting: Awaiting


class UnreadConversation(BaseModel):
    """A conversation whose calls wait but could not be read now, and why."""

    session_id: str
    pending_tools: list[str]
    reason: str


class Inbox(BaseModel):
    """Every call waiting on the reader, the oldest first (then the soonest to expire)."""

    calls: list[InboxCall] = Field(default_factory=list)
    unread: list[UnreadConversation] = Field(default_factory=list)


#: What one conversation's part of a batch decision came to (see ``Applied``).
Outcome = Literal["decided", "not_decided", "refused", "kept"]


class Applied(BaseModel):
    """What one conversation's decision applied: ``decided`` only from its result
    (``TurnResult.left_waiting``); ``not_decided`` (left waiting as it was, or a quorum's
    call that still waits for more approvals: "approval 1 of 2 counted"), ``refused``
    (the conversation refused it) or ``kept`` (no worker: Temporal holds the decision)."""

    session_id: str
    tool_call_ids: list[str]
    outcome: Outcome
    detail: str
    #: The conversation's status after the decision (decided or not_decided).
    status: str | None = None


class BatchDecision(BaseModel):
    """A batch decision: the call named, its tool and canonical arguments, and what was
    applied in each conversation."""

    action: BatchAction
    tool: str
    args_hash: str
    applied: list[Applied]
    #: Calls of the same tool in the inbox whose arguments differ: not included.
    different: list[str] = Field(default_factory=list)


def inbox_order(item: InboxCall) -> tuple[datetime, datetime, str, str]:
    """The oldest first, then the soonest to expire."""
    return (item.waiting_since, item.call.expires_at, item.session_id, item.call.tool_call_id)


def rule_of(call: PendingCall) -> str | None:
    """The rule that made ``call`` wait: ``PendingCall.rule``; for a call recorded
    before that field, its reviewer rule or the rule its reason names."""
    if call.rule or call.reviewer_rule:
        return call.rule or call.reviewer_rule
    found = RULE_IN_REASON.search(call.reason or "")
    return found.group(1) if found else None


async def read_inbox(
    conversations: Conversations,
    user_id: str,
    *,
    groups: Sequence[str] = (),
    tool: str | None = None,
    rule: str | None = None,
    session: str | None = None,
    limit: int = 1_000,
) -> Inbox:
    """The calls waiting on ``user_id`` (the owner or a reviewer, by name or by one of
    their verified ``groups``), in every conversation they may see; only those of
    ``tool``, of ``rule`` and of conversation ``session`` when given. At most ``limit``
    conversations are read. No worker is needed (see the module's docstring)."""
    user_id, groups = checked_user(user_id), sorted(set(groups))
    if session is not None:
        checked_workflow_id(session)
    temporal = conversations.temporal
    found: dict[str, WorkflowExecution] = {}
    try:
        async for run in temporal.list_workflows(awaiting_query(user_id, groups), limit=limit):
            attributes = run.typed_search_attributes
            if not concerns(attributes, user_id, groups):
                continue
            sid = run.id.removeprefix(WORKFLOW_ID_PREFIX)
            tools = attributes.get(PARLEY_PENDING_TOOLS) or []
            if (session and sid != session) or not tools or (tool and tool not in tools):
                continue
            found[run.id] = run
    except RPCError as err:
        raise ConversationRefused(
            f"Temporal refused to list conversations: {err.message}", ErrorType.TEMPORAL_REFUSED
        ) from err
    reads = asyncio.Semaphore(16)
    polling: list[bool] = []

    async def read(run: WorkflowExecution) -> tuple[list[InboxCall], UnreadConversation | None]:
        async with reads:
            return await _read_conversation(conversations, run, user_id, groups, polling)

    inbox = Inbox()
    for calls, unread in await asyncio.gather(*(read(run) for run in found.values())):
        inbox.calls += [
            c for c in calls if (not tool or c.call.name == tool) and (not rule or c.rule == rule)
        ]
        if unread is not None:
            inbox.unread.append(unread)
    inbox.calls.sort(key=inbox_order)
    inbox.unread.sort(key=lambda u: u.session_id)
    return inbox


async def _read_conversation(
    conversations: Conversations,
    run: WorkflowExecution,
    user_id: str,
    groups: list[str],
    polling: list[bool],
) -> tuple[list[InboxCall], UnreadConversation | None]:
    """The calls of one conversation waiting on ``user_id``: from its history, else
    from a state query when a worker runs, else none and why (``UnreadConversation``)."""
    attributes = run.typed_search_attributes
    sid = run.id.removeprefix(WORKFLOW_ID_PREFIX)
    owner = attributes.get(PARLEY_USER) or ""
    tools = sorted(attributes.get(PARLEY_PENDING_TOOLS) or [])
    told = await _turn_from_history(conversations, run, tools)
    escalated = sorted(attributes.get(PARLEY_ESCALATED_TO) or [])
    # A deadline that escalated a call since its turn rested left that result stale.
    if told is not None and escalated_people(told[0].pending) == escalated:
        turn, rested = told
        state = ConversationState(
            session_id=sid,
            user_id=owner,
            reviewers=list(attributes.get(PARLEY_REVIEWERS) or []),
            pending=turn.pending,
        )
        seen = [(c, awaiting(state, c, user_id, groups), rested) for c in turn.pending]
        return _waiting_on_reader(sid, owner, seen), None
    if not polling:
        try:
            polling.append(await conversations.workers_polling())
        except RPCError:
            polling.append(True)  # Temporal does not say: the query says what is wrong
    why = (
        "its history does not tell which calls wait now (the run handed over, or a timer "
        "changed them)"
    )
    if not polling[0]:
        return [], UnreadConversation(
            session_id=sid,
            pending_tools=tools,
            reason=f"{why}; no worker runs to read them: `parley show` once one does",
        )
    try:
        snapshot = await conversations.state(
            sid,
            user_id,
            StateQuery(user_id=user_id, transcript_limit=0, audit_limit=0, groups=groups),
        )
    except ConversationRefused as refusal:
        return [], UnreadConversation(session_id=sid, pending_tools=tools, reason=refusal.message)
    views = {a.tool_call_id: a for a in snapshot.awaiting}
    rested = run.start_time  # the run began at the rest it was handed over at
    seen = [(c, views[c.tool_call_id], rested) for c in snapshot.pending if c.tool_call_id in views]
    return _waiting_on_reader(sid, owner, seen), None


def _waiting_on_reader(
    session_id: str, owner: str, seen: list[tuple[PendingCall, Awaiting, datetime]]
) -> list[InboxCall]:
    """The calls the reader may decide and that have not expired."""
    now = datetime.now(UTC)
    return [
        InboxCall(
            session_id=session_id,
            owner=owner,
            call=call,
            rule=rule_of(call),
            waiting_since=call.proposed_at or rested,
            awaiting=view,
        )
        for call, view, rested in seen
        if view.may_decide and call.expires_at > now
    ]


async def _turn_from_history(
    conversations: Conversations, run: WorkflowExecution, tools: list[str]
) -> tuple[TurnResult, datetime] | None:
    """The latest turn result of the current run, and when, if it is the one whose
    calls wait now (awaiting approval, of the tools ``tools``); None when the history
    does not tell."""
    told = await latest_turn(conversations.temporal, run.id, run.run_id)
    if told is None:
        return None
    turn = told[0]
    waiting = turn.status == "awaiting_approval" and turn.pending
    return told if waiting and sorted({c.name for c in turn.pending}) == tools else None


async def decide_like(
    conversations: Conversations,
    user_id: str,
    session_id: str,
    tool_call_id: str,
    action: BatchAction,
    *,
    message: str | None = None,
    groups: Sequence[str] = (),
) -> BatchDecision:
    """Answer call ``tool_call_id`` of conversation ``session_id`` with ``action``, and
    every other call in ``user_id``'s inbox of the same tool with the same canonical
    arguments that they may answer so: one update per conversation (each call its own
    decision, audit entry and result), the arguments seen pinned. A call whose
    arguments differ is never included. Refused when the call is not in the inbox."""
    if action == "approve" and message:
        raise ConversationRefused(
            "approve takes no message; a message goes with reject (a reason)",
            ErrorType.INVALID_DECISION,
        )
    inbox = await read_inbox(conversations, user_id, groups=groups)
    named = next(
        (
            c
            for c in inbox.calls
            if c.session_id == session_id and c.call.tool_call_id == tool_call_id
        ),
        None,
    )
    if named is None:
        raise ConversationRefused(
            f"call {tool_call_id} of conversation {session_id} does not wait on you (it was "
            "decided, expired, or is not yours to decide); `parley inbox` lists the calls "
            "that do",
            ErrorType.NOT_FOUND,
        )
    tool, digest = named.call.name, named.call.args_hash

    def allowed(item: InboxCall) -> bool:
        return item.awaiting.may_approve if action == "approve" else item.awaiting.may_decide

    if not allowed(named):
        raise ConversationRefused(
            f"call {tool_call_id} of conversation {session_id} cannot be {action}d by you: "
            f"{named.awaiting.text}",
            ErrorType.INVALID_DECISION,
        )
    same = [c for c in inbox.calls if c.call.name == tool and c.call.args_hash == digest]
    if not digest:  # a call recorded without its digest matches no other
        same = [named]
    included = [c for c in same if allowed(c)]
    different = [
        f"{c.session_id}:{c.call.tool_call_id}"
        for c in inbox.calls
        if c.call.name == tool and c.call.args_hash != digest
    ]
    by_session: dict[str, list[InboxCall]] = {}
    for item in included:
        by_session.setdefault(item.session_id, []).append(item)
    updates = asyncio.Semaphore(8)

    async def one(sid: str, items: list[InboxCall]) -> Applied:
        async with updates:
            return await _decide_in(conversations, user_id, sid, items, action, message, groups)

    applied = await asyncio.gather(*(one(sid, items) for sid, items in by_session.items()))
    return BatchDecision(
        action=action, tool=tool, args_hash=digest, applied=list(applied), different=different
    )


async def _decide_in(
    conversations: Conversations,
    user_id: str,
    session_id: str,
    items: list[InboxCall],
    action: BatchAction,
    message: str | None,
    groups: Sequence[str],
) -> Applied:
    """One conversation's update; "decided" only from its applied result."""
    ids = [item.call.tool_call_id for item in items]
    decisions = [
        Decision(
            tool_call_id=item.call.tool_call_id,
            action=action,
            message=message if action == "reject" else None,
            args_hash=item.call.args_hash or None,
            preview_hash=(
                item.call.preview.hash if action == "approve" and item.call.preview else None
            ),
        )
        for item in items
    ]

    def applied(outcome: Outcome, detail: str, status: str | None = None) -> Applied:
        return Applied(
            session_id=session_id, tool_call_ids=ids, outcome=outcome, detail=detail, status=status
        )

    try:
        result = await conversations.decide(session_id, user_id, decisions, groups=groups)
    except ConversationRefused as refusal:
        kept = refusal.error_type == ErrorType.NO_WORKER
        return applied("kept" if kept else "refused", refusal.message)
    left = [item.call.tool_call_id for item in items if result.left_waiting(item.call)]
    if left:
        waiting = f"not decided: {', '.join(left)} still waiting for a decision"
        return applied("not_decided", waiting, result.status)
    counted = [
        f"{p.tool_call_id}: approval {len(p.approvals)} of {p.approvals_needed} counted"
        for p in result.pending
        if p.tool_call_id in ids
    ]
    if counted:  # a quorum's call still waits for other reviewers: not decided
        more = f"not decided: {'; '.join(counted)}, more reviewers must approve"
        return applied("not_decided", more, result.status)
    done = f"{action}d {', '.join(ids)}; the conversation is {result.status}"
    return applied("decided", done, result.status)
