"""Never wait on a task queue no worker serves: the client's liveness watch.

Client side. Temporal answers ``DescribeTaskQueue`` and ``DescribeWorkflowExecution``
without a worker, so a client call that waits for a worker can tell, in bounded time,
that none serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TypeVar

from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from parley.client.errors import ConversationRefused
from parley.errors import ErrorType
from parley.settings import Settings

T = TypeVar("T")

#: A worker long-polls its task queue continuously; one not seen for this long is gone.
POLLER_FRESH_SECONDS = 90


class LivenessWatch:
    """The liveness half of ``Conversations`` (which provides ``handle``)."""

    _client: Client
    _settings: Settings

    def handle(self, session_id: str) -> WorkflowHandle:  # pragma: no cover - overridden
        raise NotImplementedError

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
