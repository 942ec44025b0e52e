"""Talking to conversations from outside Temporal: the CLI, the gateway and tests.

Client side (never imported by workflows). Every call goes through the typed handler
references of ``ConversationWorkflow`` and ``pydantic_data_converter``. A refusal by
the workflow (not the owner, decisions owed, bad decision...) surfaces as
``ConversationRefused`` carrying the workflow's message and stable error type.

Long (about 550 lines) because ``Conversations`` is the one client API every caller
uses (CLI, chat, gateway, tests): each method pairs a workflow call with the refusal it
turns into one clear line, and with the liveness watch (no worker, no silent wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
import uuid
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from langchain_core.messages import AnyMessage
from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from parley.contracts import (
    PARLEY_PENDING_TOOLS,
    PARLEY_REVIEWERS,
    PARLEY_STATUS,
    PARLEY_USER,
    WORKFLOW_ID_PREFIX,
    ConversationSnapshot,
    ConversationStart,
    DecideInput,
    Decision,
    EndInput,
    EventPage,
    EventsQuery,
    EventsWait,
    SendMessageInput,
    StateQuery,
    TurnResult,
    check_user_id,
    workflow_id_for,
)
from parley.errors import NOT_OWNER_MESSAGE, ErrorType
from parley.settings import Settings
from parley.storage import TranscriptStore, data_converter, driver_of
from parley.workflows.conversation import ConversationWorkflow

T = TypeVar("T")

#: A worker long-polls its task queue continuously; one not seen for this long is gone.
POLLER_FRESH_SECONDS = 90


class ConversationRefused(Exception):
    """The conversation refused a call; ``message`` says why and what to do."""

    def __init__(self, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client for ``settings``' cluster; ``runtime`` (the worker's) may export metrics."""
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            data_converter=data_converter(settings),
            runtime=runtime,
        )
    except RuntimeError as err:
        raise ConversationRefused(
            f"cannot reach Temporal at {settings.temporal_address} ({_connect_reason(err)}). "
            "Is `parley dev` running, or TEMPORAL_ADDRESS set to your cluster?",
            ErrorType.UNREACHABLE,
        ) from err


def _connect_reason(err: Exception) -> str:
    """Why a connection failed, in the words of the OS or the server, without the Rust
    transport's type names (``tonic::transport::Error(Transport, ConnectError(...``)."""
    text = str(err)
    for pattern in (r'message: "([^"]+)"', r'error: "([^"]+)"'):
        found = re.findall(pattern, text)
        if found:
            return found[-1]  # the innermost: the OS's or the server's own words
    text = re.split(r"tonic::|hyper::|Status \{|\(", text, maxsplit=1)[0]
    text = text.removeprefix("Failed client connect:").strip(" :")
    return text or "the connection failed"


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


class Conversations:
    def __init__(self, client: Client, settings: Settings) -> None:
        self._client = client
        self._settings = settings

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def temporal(self) -> Client:
        return self._client

    def handle(self, session_id: str) -> WorkflowHandle[ConversationWorkflow, object]:
        return self._client.get_workflow_handle_for(
            ConversationWorkflow.run, _workflow_id(session_id)
        )

    async def send(
        self,
        session_id: str,
        user_id: str,
        text: str,
        message_id: str | None = None,
        *,
        reviewers: Sequence[str] = (),
    ) -> TurnResult:
        """Send a message, starting the conversation if it is new (update-with-start).
        ``reviewers`` (users who may read it and decide on its calls) apply only when
        this message starts the conversation."""
        user_id = _user(user_id)
        reviewers = sorted({_user(reviewer) for reviewer in reviewers} - {user_id})
        message_id = message_id or uuid.uuid4().hex[:16]  # 64 random bits: unique enough
        workflow_id = _workflow_id(session_id)
        start = WithStartWorkflowOperation(
            ConversationWorkflow.run,
            ConversationStart(
                session_id=session_id,
                user_id=user_id,
                pending_expiry_seconds=self._settings.pending_expiry_seconds,
                max_model_calls_per_turn=self._settings.max_model_calls_per_turn,
                continue_as_new_after_events=self._settings.continue_as_new_after_events,
                max_message_bytes=self._settings.max_message_bytes,
                reviewers=reviewers,
            ),
            id=workflow_id,
            task_queue=self._settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            # An ended conversation stays ended: a new message must not silently start
            # an empty one under the same id.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            # Set here, not upserted by the workflow: a start event costs fewer bytes.
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(PARLEY_USER, user_id),
                    SearchAttributePair(PARLEY_STATUS, "idle"),
                    *([SearchAttributePair(PARLEY_REVIEWERS, reviewers)] if reviewers else []),
                ]
            ),
            static_summary=f"Parley conversation {session_id}",
        )
        _check_text(text, self._settings.max_message_bytes)
        retry_hint = (
            f"Your message (id {message_id}) waits in Temporal and applies if a worker "
            f"takes it soon; to be sure, send it again with --message-id {message_id} once "
            "a worker runs: the same id is never applied twice."
        )
        try:
            return await self._watch_worker(
                session_id,
                self._client.execute_update_with_start_workflow(
                    ConversationWorkflow.send_message,
                    SendMessageInput(text=text, message_id=message_id, user_id=user_id),
                    start_workflow_operation=start,
                    id=f"message-{message_id}",
                ),
                retry_hint,
            )
        except WorkflowAlreadyStartedError as err:
            await _settle(start)
            raise ConversationRefused(
                f"conversation {session_id} has ended; use a new session id",
                ErrorType.CONVERSATION_ENDED,
            ) from err
        except (
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
            RPCError,
        ) as err:
            await _settle(start)
            raise _refusal(err, session_id) from err

    async def decide(
        self,
        session_id: str,
        user_id: str,
        decisions: Sequence[Decision],
        update_id: str | None = None,
    ) -> TurnResult:
        """Answer every pending call. The same ``update_id`` again returns the first
        result and runs nothing twice. By default the id is derived from the decisions,
        so running the same command again (after a timeout, or once a worker is back)
        attaches to the first call instead of deciding twice."""
        update_id = update_id or _decision_id(user_id, decisions)
        retry_hint = (
            "Your decision is kept by Temporal and applies when a worker takes it; run the "
            "same command again once one is running to get its result (the same decision "
            "is the same request: a decided call is never run twice)."
        )
        decided_by = _user(user_id)
        try:
            return await self._watch_worker(
                session_id,
                self.handle(session_id).execute_update(
                    ConversationWorkflow.decide,
                    DecideInput(decisions=list(decisions), decided_by=decided_by),
                    id=update_id,
                ),
                retry_hint,
            )
        except (
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
            RPCError,
        ) as err:
            raise _refusal(err, session_id) from err

    async def state(
        self, session_id: str, user_id: str, query: StateQuery | None = None
    ) -> ConversationSnapshot:
        """One page of the conversation (by default: the latest messages and audit
        entries). The workflow keeps the latest messages; ``transcript`` reads older ones."""
        query = (query or StateQuery(user_id=user_id)).model_copy(
            update={"user_id": _user(user_id)}
        )
        try:
            return await self.handle(session_id).query(ConversationWorkflow.state, query)
        except (WorkflowQueryFailedError, RPCError) as err:
            raise _refusal(err, session_id) from err

    async def transcript(
        self, session_id: str, user_id: str, offset: int = 0, limit: int = 200
    ) -> list[AnyMessage]:
        """Messages ``offset`` to ``offset + limit`` of the conversation, however old:
        those the workflow no longer keeps are read from the stored transcript chain."""
        snapshot = await self.state(
            session_id,
            user_id,
            StateQuery(
                user_id=user_id,
                transcript_offset=offset,
                transcript_limit=min(limit, 1_000),
                audit_limit=0,
            ),
        )
        if snapshot.transcript_offset <= offset or snapshot.model_context is None:
            return snapshot.transcript[:limit]
        stored = await TranscriptStore(driver_of(self._client.data_converter)).load(
            snapshot.model_context
        )
        older = stored[offset : min(offset + limit, snapshot.transcript_offset)]
        return (older + snapshot.transcript)[:limit]

    async def events(
        self, session_id: str, user_id: str, after: int = -1, limit: int = 500
    ) -> EventPage:
        try:
            return await self.handle(session_id).query(
                ConversationWorkflow.events,
                EventsQuery(user_id=_user(user_id), after=after, limit=limit),
            )
        except (WorkflowQueryFailedError, RPCError) as err:
            raise _refusal(err, session_id) from err

    async def wait_for_events(self, session_id: str, user_id: str, after: int) -> int:
        """Block until the conversation has an event after ``after`` (or ends, or hands
        over to a new run); return its latest offset. One call per conversation at a
        time is enough for any number of readers: the gateway shares it."""
        try:
            return await self.handle(session_id).execute_update(
                ConversationWorkflow.wait_for_events,
                EventsWait(user_id=_user(user_id), after=after),
                id=f"events-{uuid.uuid4().hex[:16]}",
            )
        except (
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
            RPCError,
        ) as err:
            raise _refusal(err, session_id) from err

    async def end(self, session_id: str, user_id: str) -> ConversationSnapshot:
        """End the conversation once in-flight handlers are done (an owner-checked
        update); pending calls are answered ``expired`` and never run."""
        request = EndInput(user_id=_user(user_id))
        try:
            return await self._watch_worker(
                session_id,
                self.handle(session_id).execute_update(
                    ConversationWorkflow.end, request, id=f"end-{uuid.uuid4().hex[:16]}"
                ),
                "Run it again once a worker is running, or end it now with `parley end --force`.",
            )
        except (
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
            RPCError,
        ) as err:
            raise _refusal(err, session_id, ended=f"conversation {session_id} has ended") from err

    async def force_end(self, session_id: str, user_id: str, reason: str | None = None) -> None:
        """Terminate the conversation's workflow, whatever its state and with no worker.
        Only its owner may: the owner is read from the ``ParleyUser`` search attribute,
        which Temporal serves without a worker. Pending calls never run."""
        user_id = _user(user_id)
        handle = self.handle(session_id)
        try:
            description = await handle.describe()
        except RPCError as err:
            raise _refusal(err, session_id) from err
        owner = description.typed_search_attributes.get(PARLEY_USER)
        if owner != user_id:
            # Same words as the workflow's own refusal: it names no one.
            raise ConversationRefused(NOT_OWNER_MESSAGE, ErrorType.NOT_OWNER)
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise ConversationRefused(
                f"conversation {session_id} has ended", ErrorType.CONVERSATION_ENDED
            )
        try:
            await handle.terminate(reason=reason or f"ended with --force by {user_id}")
        except RPCError as err:
            raise _refusal(err, session_id, ended=f"conversation {session_id} has ended") from err

    async def list(
        self, user_id: str, limit: int = 1_000, *, reviewing: bool = False
    ) -> list[ConversationSummary]:
        """The user's conversations, from Temporal's visibility (no worker needed):
        those awaiting a decision first, then the others, most recent first. At most
        ``limit`` workflow runs are read. With ``reviewing``, the conversations of
        others that name the user a reviewer instead. Subagents' conversations are
        left out: their calls wait, and are decided, on their parents' lists."""
        user_id = _user(user_id)
        query = (
            f"WorkflowType = {_literal(ConversationWorkflow.__name__)} AND ParentWorkflowId IS NULL"
        )
        if reviewing:
            query += f" AND ParleyReviewers = {_literal(user_id)}"
        elif '"' in user_id or "\\" in user_id:
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
                mine = (
                    user_id in (attributes.get(PARLEY_REVIEWERS) or [])
                    if reviewing
                    else attributes.get(PARLEY_USER) == user_id
                )
                if mine:
                    runs.setdefault(execution.id, []).append(execution)
        except RPCError as err:
            raise ConversationRefused(
                f"Temporal refused to list conversations: {err.message}", "RPCError"
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

    # --- liveness: never wait on a task queue no worker serves --------------------

    async def workers_polling(self) -> bool:
        """Whether a worker has polled this task queue lately (Temporal's
        DescribeTaskQueue, which answers without a worker)."""
        response = await self._client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self._client.namespace,
                task_queue=TaskQueue(name=self._settings.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        now = time.time()
        return any(
            now - poller.last_access_time.ToSeconds() < POLLER_FRESH_SECONDS
            for poller in response.pollers
        )

    def _no_worker(self, what_happens: str) -> ConversationRefused:
        return ConversationRefused(
            f"no worker is serving task queue {self._settings.task_queue!r} (none has "
            f"polled it in the last {POLLER_FRESH_SECONDS} s): start one with `parley "
            f"worker` or `parley dev`, or check PARLEY_TASK_QUEUE. {what_happens}",
            ErrorType.NO_WORKER,
        )

    async def _watch_worker(self, session_id: str, call: Awaitable[T], what_happens: str) -> T:
        """Await ``call``; every ``worker_wait_seconds``, give up with a clear answer if
        no worker serves the task queue, or none has picked up the conversation's
        workflow task for that long (a worker that just died is still listed as a
        poller for a minute or so)."""
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._settings.worker_wait_seconds)
                if done:
                    return task.result()
                if not await self.workers_polling() or await self._task_unclaimed(session_id):
                    raise self._no_worker(what_happens)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _task_unclaimed(self, session_id: str) -> bool:
        """Whether the conversation has a workflow task that no worker has started for
        ``worker_wait_seconds`` (Temporal's DescribeWorkflowExecution)."""
        try:
            raw = (await self.handle(session_id).describe()).raw_description
        except RPCError:
            return False
        if not raw.HasField("pending_workflow_task"):
            return False
        pending = raw.pending_workflow_task
        if pending.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
            return False
        # A task moved from a dead worker's sticky queue keeps its first scheduling time.
        since = (
            pending.original_scheduled_time
            if pending.HasField("original_scheduled_time")
            else pending.scheduled_time
        )
        return time.time() - since.ToSeconds() >= self._settings.worker_wait_seconds


def _decision_id(user_id: str, decisions: Sequence[Decision]) -> str:
    """The same decisions by the same user, the same update id. Call ids are unique in
    a conversation, so equal decisions are one intent, never two."""
    ordered = sorted(
        (d.model_dump(mode="json") for d in decisions), key=lambda d: d["tool_call_id"]
    )
    digest = hashlib.sha256(json.dumps([user_id, ordered], sort_keys=True).encode()).hexdigest()
    return f"decide-{digest[:16]}"


def _literal(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _check_text(text: str, max_bytes: int) -> None:
    """Refuse, before anything is sent (and so before a conversation is started for
    it), a message the conversation would refuse."""
    if not text.strip():
        raise ConversationRefused("the message is empty", ErrorType.INVALID_MESSAGE)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise ConversationRefused(
            f"the message holds text that is not valid Unicode ({err.reason} at "
            f"character {err.start}); send it as UTF-8",
            ErrorType.INVALID_MESSAGE,
        ) from None
    if size > max_bytes:
        raise ConversationRefused(
            f"the message is {size:,} bytes; a message may be at most {max_bytes:,} bytes "
            "(PARLEY_MAX_MESSAGE_BYTES). Send a shorter message, or share a large text as "
            "a file a tool can read.",
            ErrorType.MESSAGE_TOO_LARGE,
        )


def check_identity(session_id: str, user_id: str) -> None:
    """Refuse a malformed session or user id locally, before contacting Temporal."""
    _workflow_id(session_id)
    _user(user_id)


def _user(user_id: str) -> str:
    try:
        return check_user_id(user_id)
    except ValueError as err:
        raise ConversationRefused(str(err), ErrorType.INVALID_USER) from None


def _workflow_id(session_id: str) -> str:
    try:
        return workflow_id_for(session_id)
    except ValueError as err:
        raise ConversationRefused(str(err), ErrorType.INVALID_SESSION) from None


async def _settle(start: WithStartWorkflowOperation[object, object]) -> None:
    """Read the outcome of a refused update-with-start's start operation: the SDK keeps
    it in a future, and an unread failure is logged later as "Future exception was never
    retrieved". Bounded, in case the SDK never settled it."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(start.workflow_handle(), timeout=1)


def _refusal(err: Exception, session_id: str, *, ended: str | None = None) -> ConversationRefused:
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND and "already completed" in err.message:
            # A call to a closed workflow: the conversation exists, and has ended.
            return ConversationRefused(
                ended or f"conversation {session_id} has ended; use a new session id",
                ErrorType.CONVERSATION_ENDED,
            )
        if err.status == RPCStatusCode.NOT_FOUND:
            return ConversationRefused(f"no conversation {session_id} exists", ErrorType.NOT_FOUND)
        return ConversationRefused(f"Temporal refused the call: {err.message}", "RPCError")
    if isinstance(err, WorkflowQueryFailedError):
        if err.message == NOT_OWNER_MESSAGE:
            return ConversationRefused(err.message, ErrorType.NOT_OWNER)
        return ConversationRefused(str(err), "QueryFailed")
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        return ConversationRefused(
            f"gave up waiting for conversation {session_id}; the turn goes on in Temporal: "
            "see its result with `parley show`",
            "StillRunning",
        )
    cause = err.cause if isinstance(err, WorkflowUpdateFailedError) else None
    if isinstance(cause, ApplicationError):
        return ConversationRefused(cause.message, cause.type)
    return ConversationRefused(str(cause or err))
