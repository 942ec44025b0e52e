"""Never wait on a task queue no worker serves, and never call a busy worker "no worker":
the client's liveness watch.

Client side. Whether a worker serves the task queue is read from what Temporal records,
all of it answered without a worker: ``DescribeTaskQueue`` lists, for each partition of
the workflow and the activity task queue and for a worker's sticky queue, the workers
polling it and when each last began or ended a poll (a long poll lasts up to a minute);
``DescribeWorkflowExecution`` says whether the conversation's workflow task waits in a
queue, and since when; the history names the sticky queue of the worker that ran the
conversation last. A live worker, idle or busy, is seen: an idle one has a poll open and
takes a task at once (the poll ends, and is recorded), a busy one begins a poll each
time it has a free slot. So a watched call that has not come back:

- no poller listed on the workflow task queue: no worker;
- no poll recorded on any of its queues for ``POLLER_FRESH_SECONDS``: no worker (a live
  one's long poll ends, and it polls again, within a minute);
- no workflow task of the conversation waits (a worker is at work on the call: a turn
  may rightly be long, and a dead worker's task comes back to a queue when Temporal's
  timeout for it runs out): keep waiting;
- its workflow task (or, for a query, the query) has waited ``worker_wait_seconds``,
  and no worker has polled any of the queues since: no worker (a live one would have
  taken it, or polled for more work meanwhile);
- it has waited that long and a worker has polled since: a backlog behind a live,
  busy worker; keep waiting, and say once that it is queued.

Time enters only as Temporal's own bounds (a long poll's minute) and as the interval
between two looks; never as a guess of how long a worker takes. (A worker that, every
slot held, finishes nothing and polls nothing for a whole interval looks to Temporal
just like a killed one: nothing else it records tells them apart.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    PendingWorkflowTaskState,
    TaskQueueKind,
    TaskQueueType,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeTaskQueueResponse,
    GetWorkflowExecutionHistoryReverseRequest,
    ListTaskQueuePartitionsRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from parley.client.errors import ConversationRefused
from parley.config.settings import Settings
from parley.contracts.errors import ErrorType

T = TypeVar("T")

log = logging.getLogger("parley.client")

#: A worker's long poll of its task queue lasts up to a minute, and Temporal records when
#: each one begins and ends: a worker with no poll recorded for this long is gone.
POLLER_FRESH_SECONDS = 90

#: Watched calls that look at the task queue within this long of each other share one
#: look (a burst of calls asks Temporal once, not once each).
LOOK_SHARED_SECONDS = 1.0

#: How many of the conversation's latest events are searched for its sticky queue.
STICKY_EVENTS = 25

_WORKFLOW = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
_ACTIVITY = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY


class NoWorker(Exception):
    """No worker serves the task queue: the watched call was given up (and cancelled)."""


@dataclass(frozen=True)
class QueueLook:
    """What Temporal said of the task queue, asked at ``taken_at`` (epoch seconds)."""

    taken_at: float
    #: A poller is listed on the workflow task queue (for 5 minutes after its last poll).
    listed: bool
    #: When a worker last began or ended a poll of the workflow or activity task queue,
    #: any partition (epoch seconds), if any poller is listed.
    newest_poll: float | None
    #: Workflow tasks waiting for a worker, all partitions (Temporal's approximation).
    backlog: int

    def live(self) -> bool:
        """A worker polled the task queue lately: a live one records a poll a minute."""
        newest = self.newest_poll
        return self.listed and newest is not None and self.taken_at - newest < POLLER_FRESH_SECONDS


@dataclass(frozen=True)
class Verdict:
    """``gone``: no worker will take the watched call; ``queued``: it waits behind a
    live worker's backlog; ``working``: a worker has it, or it is too soon to say."""

    word: str
    look: QueueLook | None = None


class LivenessWatch:
    """The watch ``Conversations`` puts on each call that waits for a worker, over
    ``settings``' task queue; ``handle`` names a conversation's workflow."""

    def __init__(
        self, client: Client, settings: Settings, handle: Callable[[str], WorkflowHandle]
    ) -> None:
        self._client = client
        self._settings = settings
        self._handle = handle
        self._shared_look: tuple[float, asyncio.Task[QueueLook]] | None = None

    async def workers_polling(self) -> bool:
        """Whether a worker has polled this task queue lately (Temporal's
        DescribeTaskQueue, which answers without a worker). Raises ``RPCError`` if
        Temporal does not answer."""
        return (await self._look()).live()

    def no_worker_line(self) -> str:
        return (
            f"no worker is serving task queue {self._settings.task_queue!r} (none has polled "
            f"it in the last {self._settings.worker_wait_seconds:g} s): start one with "
            "`parley worker` or `parley dev`, or check PARLEY_TASK_QUEUE."
        )

    def _no_worker(self, what_happens: str) -> ConversationRefused:
        return ConversationRefused(f"{self.no_worker_line()} {what_happens}", ErrorType.NO_WORKER)

    async def watch(
        self,
        session_id: str,
        call: Awaitable[T],
        what_happens: str | None = None,
        *,
        query: bool = False,
    ) -> T:
        """Await ``call``; every ``worker_wait_seconds``, give up if no worker serves
        the task queue (``ConversationRefused`` saying ``what_happens``, or ``NoWorker``
        without it). A backlog behind a live worker is waited out, and logged once as
        queued. A ``query`` has no workflow task of its own: it waits from when it was
        sent; an update waits while its workflow task does (a turn may rightly be long)."""
        sent_at = time.time()
        task = asyncio.ensure_future(call)
        said_queued = False
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._settings.worker_wait_seconds)
                if done:
                    return task.result()
                verdict = await self._verdict(session_id, sent_at, query=query)
                if verdict.word == "gone":
                    if what_happens is None:
                        raise NoWorker
                    raise self._no_worker(what_happens)
                if verdict.word == "queued" and not said_queued:
                    said_queued = True
                    self._say_queued(session_id, time.time() - sent_at, verdict.look)
        finally:
            if not task.done():
                task.cancel()
            # Read the outcome whatever it is, so an unread failure is never logged as
            # "Future exception was never retrieved".
            with contextlib.suppress(BaseException):
                await task

    def _say_queued(self, session_id: str, waited: float, look: QueueLook | None) -> None:
        backlog = look.backlog if look is not None else 0
        behind = f", behind about {backlog} workflow tasks," if backlog else ""
        log.warning(
            "conversation %s is queued: a worker serves task queue %r and is busy%s; it has "
            "not taken this call yet after %.0f s; still waiting",
            session_id,
            self._settings.task_queue,
            behind,
            waited,
        )

    async def _verdict(self, session_id: str, sent_at: float, *, query: bool) -> Verdict:
        """Judge the watched call from what Temporal knows (see the module's rules)."""
        queued_since = await self._task_queued_since(session_id)
        waiting_since = None
        if queued_since is not None or query:
            waiting_since = min(sent_at, queued_since) if queued_since is not None else sent_at
        wait = self._settings.worker_wait_seconds
        try:
            # A look taken once the call has waited its full interval, so that "no poll
            # since" covers all of it.
            look = await self._look(None if waiting_since is None else waiting_since + wait)
        except RPCError:
            return Verdict("working")  # Temporal itself did not answer: the call's will say
        if not look.live():
            return Verdict("gone", look)
        if waiting_since is None or look.taken_at - waiting_since < wait:
            return Verdict("working", look)
        polled_since = look.newest_poll is not None and look.newest_poll >= waiting_since
        if not polled_since:
            sticky = await self._sticky_poll(session_id)
            polled_since = sticky is not None and sticky >= waiting_since
        if not polled_since:
            return Verdict("gone", look)
        return Verdict("queued" if queued_since is not None else "working", look)

    async def _look(self, not_before: float | None = None) -> QueueLook:
        """A look at the task queue, shared with the calls that asked within
        ``LOOK_SHARED_SECONDS`` (on this event loop), if it began at ``not_before`` or
        later."""
        loop = asyncio.get_running_loop()
        shared = self._shared_look
        if shared is not None:
            began, task = shared
            fresh = time.time() - began < LOOK_SHARED_SECONDS
            if task.get_loop() is loop and fresh and (not_before is None or began >= not_before):
                return await asyncio.shield(task)
        began = time.time()
        task = loop.create_task(self._take_look(began))
        # Read its outcome even if every caller was cancelled meanwhile.
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._shared_look = (began, task)
        return await asyncio.shield(task)

    async def _take_look(self, taken_at: float) -> QueueLook:
        """Every partition of the workflow and the activity task queue, described
        (``DescribeTaskQueue``: its pollers; the root's stats count the backlog of all)."""
        workflow_parts, activity_parts = await self._partitions()
        queue = self._settings.task_queue
        kinds = [(name, _WORKFLOW) for name in workflow_parts]
        kinds += [(name, _ACTIVITY) for name in activity_parts]
        answers = await asyncio.gather(
            *(self._describe(name, kind, stats=name == queue) for name, kind in kinds)
        )
        polls = [_epoch(p.last_access_time) for answer in answers for p in answer.pollers]
        workflow_answers = answers[: len(workflow_parts)]
        return QueueLook(
            taken_at=taken_at,
            listed=any(answer.pollers for answer in workflow_answers),
            newest_poll=max(polls, default=None),
            backlog=sum(answer.stats.approximate_backlog_count for answer in workflow_answers),
        )

    async def _partitions(self) -> tuple[list[str], list[str]]:
        """The names of the task queue's workflow and activity partitions (a worker's
        poll is recorded on the partition it reached); the root alone if Temporal does
        not list them."""
        queue = self._settings.task_queue
        try:
            listed = await self._client.workflow_service.list_task_queue_partitions(
                ListTaskQueuePartitionsRequest(
                    namespace=self._client.namespace, task_queue=TaskQueue(name=queue)
                )
            )
        except RPCError:
            return [queue], [queue]
        workflow = [p.key for p in listed.workflow_task_queue_partitions] or [queue]
        activity = [p.key for p in listed.activity_task_queue_partitions] or [queue]
        return workflow, activity

    async def _describe(
        self, name: str, kind: TaskQueueType.ValueType, *, stats: bool = False, sticky: bool = False
    ) -> DescribeTaskQueueResponse:
        task_queue = (
            TaskQueue(
                name=name,
                kind=TaskQueueKind.TASK_QUEUE_KIND_STICKY,
                normal_name=self._settings.task_queue,
            )
            if sticky
            else TaskQueue(name=name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL)
        )
        return await self._client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self._client.namespace,
                task_queue=task_queue,
                task_queue_type=kind,
                report_stats=stats,
            )
        )

    async def _sticky_poll(self, session_id: str) -> float | None:
        """When a worker last began or ended a poll of the sticky queue of the worker
        that ran the conversation last (named in its history): a busy worker may poll
        nothing else for a while. None if there is none, or Temporal does not say."""
        try:
            history = await self._client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=self._client.namespace,
                    execution=WorkflowExecution(workflow_id=self._handle(session_id).id),
                    maximum_page_size=STICKY_EVENTS,
                )
            )
            sticky = next(
                (
                    event.workflow_task_scheduled_event_attributes.task_queue.name
                    for event in history.history.events
                    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
                    and event.workflow_task_scheduled_event_attributes.task_queue.kind
                    == TaskQueueKind.TASK_QUEUE_KIND_STICKY
                ),
                None,
            )
            if sticky is None:
                return None
            answer = await self._describe(sticky, _WORKFLOW, sticky=True)
        except RPCError:
            return None
        return max((_epoch(p.last_access_time) for p in answer.pollers), default=None)

    async def _task_queued_since(self, session_id: str) -> float | None:
        """When the conversation's workflow task that no worker has started yet was
        queued (Temporal's DescribeWorkflowExecution), or None if none waits."""
        try:
            raw = (await self._handle(session_id).describe()).raw_description
        except RPCError:
            return None
        if not raw.HasField("pending_workflow_task"):
            return None
        pending = raw.pending_workflow_task
        if pending.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
            return None
        # A task moved from a dead worker's sticky queue keeps its first scheduling time.
        since = (
            pending.original_scheduled_time
            if pending.HasField("original_scheduled_time")
            else pending.scheduled_time
        )
        return _epoch(since)


def _epoch(timestamp: Timestamp) -> float:
    return timestamp.seconds + timestamp.nanos / 1e9
