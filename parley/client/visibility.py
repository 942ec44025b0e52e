"""Listing conversations from Temporal's visibility: no worker needed.

Client side. ``ConversationListing`` (which ``Conversations`` holds, and answers
``Conversations.list`` with) reads the workflow runs a user owns (or reviews) with their
search attributes (``ParleyUser``, ``ParleyStatus``, ``ParleyPendingTools``), and the
time of each open one's latest history event. ``awaiting_query`` and ``concerns`` find
the conversations awaiting a decision a user may be asked for (the inbox's): theirs,
those they review, and those with a call escalated to them (``ParleyEscalatedTo``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError

from parley.client.errors import ConversationRefused, checked_user
from parley.contracts import (
    PARLEY_ESCALATED_TO,
    PARLEY_PENDING_TOOLS,
    PARLEY_REVIEWERS,
    PARLEY_STATUS,
    PARLEY_USER,
    WORKFLOW_ID_PREFIX,
    TurnResult,
)
from parley.contracts.errors import ErrorType
from parley.contracts.reviewers import names_of
from parley.workflows.conversation import ConversationWorkflow


class ConversationSummary(BaseModel):
    """One conversation as ``Conversations.list`` finds it in Temporal's visibility."""

    session_id: str
    workflow_id: str
    #: The status at rest (``ParleyStatus``: awaiting_approval, idle, failed), or
    #: ``ended`` once the workflow has closed (ended, terminated, timed out...).
    status: str
    #: The tools whose calls wait for a decision (``ParleyPendingTools``).
    pending_tools: list[str]
    started_at: datetime
    #: When the conversation last changed: its close time, or its latest history event.
    last_activity_at: datetime
    #: Temporal's status of the workflow execution: running, completed, terminated...
    execution_status: str


class ConversationListing:
    """What Temporal's visibility and histories tell of conversations, without a worker."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def list(
        self,
        user_id: str,
        limit: int = 1_000,
        *,
        reviewing: bool = False,
        groups: Sequence[str] = (),
    ) -> list[ConversationSummary]:
        """The user's conversations, from Temporal's visibility (no worker needed):
        those awaiting a decision first, then the others, most recent first. At most
        ``limit`` workflow runs are read. With ``reviewing``, the conversations of
        others that name the user a reviewer instead, or one of their verified
        ``groups`` (a reviewer ``group:<name>``; the gateway's, from an OpenID Connect
        token). Subagents' conversations are left out: their calls wait, and are
        decided, on their parents' lists."""
        user_id = checked_user(user_id)
        names = sorted(names_of(user_id, groups))
        query = (
            f"WorkflowType = {_literal(ConversationWorkflow.__name__)} AND ParentWorkflowId IS NULL"
        )
        if reviewing:
            query += f" AND {_keyword_in('ParleyReviewers', names)}"
        elif _unmatchable(user_id):
            # Temporal's SQL visibility never matches such a keyword with ``=``: select
            # by the part before it, and keep the exact owner below.
            prefix = re.split(r'["\\]', user_id, maxsplit=1)[0]
            if prefix:
                query += f" AND ParleyUser STARTS_WITH {_literal(prefix)}"
        else:
            query += f" AND ParleyUser = {_literal(user_id)}"
        runs: dict[str, list[WorkflowExecution]] = {}
        try:
            async for execution in self._client.list_workflows(query, limit=limit):
                attributes = execution.typed_search_attributes
                owner = attributes.get(PARLEY_USER)
                mine = (
                    not set(names).isdisjoint(attributes.get(PARLEY_REVIEWERS) or [])
                    and owner != user_id  # others' (their group may review their own)
                    if reviewing
                    else owner == user_id
                )
                if mine:
                    runs.setdefault(execution.id, []).append(execution)
        except RPCError as err:
            raise ConversationRefused(
                f"Temporal refused to list conversations: {err.message}", ErrorType.TEMPORAL_REFUSED
            ) from err
        lookups = asyncio.Semaphore(16)  # one history read per open conversation

        async def summary(group: list[WorkflowExecution]) -> ConversationSummary:
            async with lookups:
                return await self._summary(group)

        found = await asyncio.gather(*(summary(group) for group in runs.values()))
        return sorted(
            found,
            key=lambda c: (c.status != "awaiting_approval", -c.last_activity_at.timestamp()),
        )

    async def _summary(self, runs: list[WorkflowExecution]) -> ConversationSummary:
        """One conversation from its runs (more than one after continue-as-new)."""
        continued = WorkflowExecutionStatus.CONTINUED_AS_NEW
        current = max(runs, key=lambda r: (r.status != continued, r.start_time))
        open_ = current.status == WorkflowExecutionStatus.RUNNING
        attributes = current.typed_search_attributes
        last = current.close_time
        if last is None:
            last = await self._latest_event_time(current.id, current.run_id) or current.start_time
        return ConversationSummary(
            session_id=current.id.removeprefix(WORKFLOW_ID_PREFIX),
            workflow_id=current.id,
            status=(attributes.get(PARLEY_STATUS) or "idle") if open_ else "ended",
            pending_tools=list(attributes.get(PARLEY_PENDING_TOOLS) or []) if open_ else [],
            started_at=min(r.start_time for r in runs),
            last_activity_at=last,
            execution_status=(current.status.name if current.status else "UNKNOWN").lower(),
        )

    async def pending_from_history(self, workflow_id: str, pending_tools: list[str]) -> list[str]:
        """The ids of the calls waiting for a decision, read without a worker: those of
        the latest turn result in the run's history (:func:`latest_turn`) if it waits on
        the tools ``pending_tools`` (``ParleyPendingTools``, which the workflow keeps
        current). Empty when the history does not tell."""
        if not pending_tools:
            return []
        told = await latest_turn(self._client, workflow_id)
        if told is None or told[0].status != "awaiting_approval":
            return []
        turn = told[0]
        if sorted({call.name for call in turn.pending}) != sorted(pending_tools):
            return []  # the latest turn that waited is not the one waiting now
        return [call.tool_call_id for call in turn.pending]

    async def _latest_event_time(self, workflow_id: str, run_id: str) -> datetime | None:
        try:
            response = await self._client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=self._client.namespace,
                    execution=ExecutionRef(workflow_id=workflow_id, run_id=run_id),
                    maximum_page_size=1,
                )
            )
        except RPCError:
            return None
        if not response.history.events:
            return None
        return response.history.events[0].event_time.ToDatetime(tzinfo=UTC)


def awaiting_query(user_id: str, groups: Sequence[str]) -> str:
    """The open conversations (not subagents') awaiting a decision that ``user_id`` owns,
    reviews (by name or as one of their ``groups``) or had a pending call escalated to;
    ``concerns`` keeps the exact ones."""
    reviewers = _keyword_in("ParleyReviewers", sorted(names_of(user_id, groups)))
    owner = f"ParleyUser = {_literal(user_id)}"
    if _unmatchable(user_id):
        # Temporal's SQL visibility never matches such a keyword with ``=``: select by
        # the part before it; ``concerns`` keeps the exact.
        prefix = re.split(r'["\\]', user_id, maxsplit=1)[0]
        owner = f"ParleyUser STARTS_WITH {_literal(prefix)}" if prefix else "ParleyUser IS NOT NULL"
    escalated = _keyword_in("ParleyEscalatedTo", [user_id])
    return (
        f"WorkflowType = {_literal(ConversationWorkflow.__name__)} AND ParentWorkflowId IS NULL "
        "AND ExecutionStatus = 'Running' AND ParleyStatus = 'awaiting_approval' "
        f"AND ({owner} OR {reviewers} OR {escalated})"
    )


def concerns(attributes: TypedSearchAttributes, user_id: str, groups: Sequence[str]) -> bool:
    """Whether a conversation's search attributes name ``user_id`` its owner, a reviewer
    (by name or as one of their ``groups``) or someone a pending call was escalated to
    (that person by name: the gate compares an ``escalate_to`` with the user alone)."""
    return (
        attributes.get(PARLEY_USER) == user_id
        or not names_of(user_id, groups).isdisjoint(attributes.get(PARLEY_REVIEWERS) or [])
        or user_id in (attributes.get(PARLEY_ESCALATED_TO) or [])
    )


def _unmatchable(value: str) -> bool:
    """Whether Temporal's SQL visibility cannot compare a keyword with ``value`` (a ``"``
    or a backslash: a query naming it is refused, "unterminated string")."""
    return '"' in value or "\\" in value


def _keyword_in(field: str, values: Sequence[str]) -> str:
    """``field`` (a keyword list) holding one of ``values``; when one of them cannot be
    compared (:func:`_unmatchable`), any value of ``field``: the caller keeps the exact
    matches from the attributes."""
    if any(_unmatchable(v) for v in values):
        return f"{field} IS NOT NULL"
    return f"{field} IN ({', '.join(map(_literal, values))})"


def _literal(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: How far back :func:`latest_turn` reads a history: pages of events, newest first.
HISTORY_PAGE_EVENTS = 100
HISTORY_PAGES = 5


async def latest_turn(
    client: Client, workflow_id: str, run_id: str = ""
) -> tuple[TurnResult, datetime] | None:
    """The latest turn result an update of the run (``run_id``; default the current
    one) returned, and when: an older one was answered since. None when none is among
    its last ``HISTORY_PAGES × HISTORY_PAGE_EVENTS`` events. No worker needed."""
    completed = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    token = b""
    for _ in range(HISTORY_PAGES):
        try:
            response = await client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=client.namespace,
                    execution=ExecutionRef(workflow_id=workflow_id, run_id=run_id),
                    maximum_page_size=HISTORY_PAGE_EVENTS,
                    next_page_token=token,
                )
            )
        except RPCError:
            return None
        for event in response.history.events:
            if event.event_type != completed:
                continue
            outcome = event.workflow_execution_update_completed_event_attributes.outcome
            if not outcome.HasField("success") or not outcome.success.payloads:
                continue
            try:
                (turn,) = await client.data_converter.decode(outcome.success.payloads, [TurnResult])
            except Exception:  # another update's result (an event offset, an undo...)
                continue
            if isinstance(turn, TurnResult):
                return turn, event.event_time.ToDatetime(tzinfo=UTC)
        token = response.next_page_token
        if not token:
            return None
    return None
