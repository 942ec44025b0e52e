"""Never wait on a task queue no worker serves, and never call a backlog "no worker":
the client's liveness watch.

Client side. Temporal answers ``DescribeTaskQueue`` (the pollers and when each last
polled) and ``DescribeWorkflowExecution`` (the conversation's workflow task waiting for
a worker) without a worker, so a client call that waits for one can tell, in bounded
time, which of these it is:

- a worker is at work on the call (no workflow task waits): keep waiting;
- the call's workflow task waits in the queue, and a worker has polled the queue since
  it was queued: a backlog behind a live worker; keep waiting, and say it is queued;
- no worker has polled the queue in ``POLLER_FRESH_SECONDS``, or the call has waited
  ``worker_wait_seconds`` and none has polled since it was queued: no worker. (An idle
  worker's long poll is recorded when it begins and lasts up to a minute, so a worker
  that died a moment ago is still listed; a live one takes a queued task at once, or
  polls again as soon as it has a free slot.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from parley.client.errors import ConversationRefused
from parley.errors import ErrorType
from parley.settings import Settings

T = TypeVar("T")

log = logging.getLogger("parley.client")

#: A worker long-polls its task queue continuously (each poll is recorded when it begins
#: and lasts up to a minute); one not seen for this long is gone.
POLLER_FRESH_SECONDS = 90


class NoWorker(Exception):
    """No worker serves the task queue: the watched call was given up (and cancelled)."""


class LivenessWatch:
    """The liveness half of ``Conversations`` (which provides ``handle``)."""

    _client: Client
    _settings: Settings

    def handle(self, session_id: str) -> WorkflowHandle:  # pragma: no cover - overridden
        raise NotImplementedError

    async def workers_polling(self) -> bool:
        """Whether a worker has polled this task queue lately (Temporal's
        DescribeTaskQueue, which answers without a worker)."""
        newest = await self._newest_poll()
        return newest is not None and time.time() - newest < POLLER_FRESH_SECONDS

    async def _newest_poll(self) -> float | None:
        """When a worker last began to poll this task queue (epoch seconds), if any
        poller is still listed."""
        response = await self._client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self._client.namespace,
                task_queue=TaskQueue(name=self._settings.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return max((_epoch(p.last_access_time) for p in response.pollers), default=None)

    def no_worker_line(self) -> str:
        return (
            f"no worker is serving task queue {self._settings.task_queue!r} (none has taken "
            f"the call within {self._settings.worker_wait_seconds:g} s, nor polled the queue "
            "since): start one with `parley worker` or `parley dev`, or check "
            "PARLEY_TASK_QUEUE."
        )

    def _no_worker(self, what_happens: str) -> ConversationRefused:
        return ConversationRefused(f"{self.no_worker_line()} {what_happens}", ErrorType.NO_WORKER)

    async def _watch_worker(
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
        queued. A ``query`` is answered at once by a live worker, so one that waits is
        judged from when it was sent; an update may rightly wait for a long turn."""
        sent_at = time.time()
        task = asyncio.ensure_future(call)
        said_queued = False
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._settings.worker_wait_seconds)
                if done:
                    return task.result()
                verdict = await self._verdict(session_id, sent_at, query=query)
                if verdict == "gone":
                    if what_happens is None:
                        raise NoWorker
                    raise self._no_worker(what_happens)
                if verdict == "queued" and not said_queued:
                    said_queued = True
                    log.warning(
                        "conversation %s is queued: a worker serves task queue %r and has "
                        "not taken it yet after %.0f s; still waiting",
                        session_id,
                        self._settings.task_queue,
                        time.time() - sent_at,
                    )
        finally:
            if not task.done():
                task.cancel()
            # Read the outcome whatever it is, so an unread failure is never logged as
            # "Future exception was never retrieved".
            with contextlib.suppress(BaseException):
                await task

    async def _verdict(self, session_id: str, sent_at: float, *, query: bool) -> str:
        """``gone`` if no worker will take the watched call; ``queued`` if its workflow
        task has waited ``worker_wait_seconds`` behind a live worker; else ``working``.
        A worker is at work on an update when no workflow task of the conversation
        waits; a query has no workflow task of its own, so it is judged from when it
        was sent."""
        queued_since = await self._task_queued_since(session_id)
        try:
            newest = await self._newest_poll()
        except RPCError:
            return "working"  # Temporal itself did not answer: the call's own error will say
        now = time.time()
        if newest is None or now - newest >= POLLER_FRESH_SECONDS:
            return "gone"
        if queued_since is None and not query:
            return "working"
        waiting_since = min(sent_at, queued_since) if queued_since is not None else sent_at
        if now - waiting_since < self._settings.worker_wait_seconds:
            return "working"
        # A live worker takes a queued task at once, or polls again as soon as it has a
        # free slot: no poll since the call was sent, for that long, means none is alive.
        if newest < waiting_since:
            return "gone"
        return "queued" if queued_since is not None else "working"

    async def _task_queued_since(self, session_id: str) -> float | None:
        """When the conversation's workflow task that no worker has started yet was
        queued (Temporal's DescribeWorkflowExecution), or None if none waits."""
        try:
            raw = (await self.handle(session_id).describe()).raw_description
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
