"""Messages that arrive while a turn runs (``while_busy``). Workflow side (deterministic;
it cancels only the model call's task, never starts anything itself).

The sender chooses per message (``SendMessageInput.while_busy``); the conversation's
default is ``ConversationStart.while_busy``, else ``reject``:

- ``reject``: refused by the gate with ``TurnInProgress`` (one line);
- ``enqueue``: the message waits in ``ConversationState.queued_messages`` (audited
  ``enqueued``); once the conversation rests with no decision owed, the run loop
  starts a turn with the oldest (:meth:`Busy.run_next`), in order, one per turn;
- ``interrupt``: the message waits in the same queue. If a model call is in flight it
  is cancelled (its activity's handle: the task that awaits it is cancelled, and the
  activity heartbeats, so the cancel reaches it), what it streamed is withdrawn
  (``parley.stream_discarded``), the cancel is audited (``interrupted``) and sent as
  ``CUSTOM parley.interrupted``, and the model is called again with every queued
  message up to this one added, in order. A tool is never cancelled: a message that
  comes while a tool runs is added before the turn's next model call; if the turn
  rests without one, the message waits like an enqueued one.

A message is applied once: it enters the conversation (``Ledger.enter``) when it
leaves the queue. Its update is parked (``Deduplication.park``, the one way an update
waits for a later turn) and returns the result of the turn whose model call first saw
it (:meth:`Busy.answered`), also kept for retries of the same update id. The queue is
bounded (``QUEUED_MESSAGES_MAX``); the run never continues as new while messages wait,
since their updates belong to the run; a conversation that ends refuses them, recorded
as ``unqueued``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import AIMessage

    from parley.contracts import SendMessageInput, TurnResult
    from parley.contracts.busy import QueuedMessage, WhileBusy
    from parley.contracts.errors import ConversationEnded
    from parley.contracts.names import INTERRUPTED_EVENT
    from parley.workflows.context import Records, View
    from parley.workflows.turn.front_end import FrontEnd
    from parley.workflows.turn.streaming import INTERRUPTED, ReplyStream

#: ``workflow.patched`` id: from here on a model call runs in its own task, so an
#: interrupting message can cancel it (histories recorded before await it directly).
INTERRUPTIBLE_MODEL_CALLS = "interruptible-model-calls"
#: The ``CUSTOM`` event that says a model call was cancelled by a message.


class Busy:
    """The one owner of ``ConversationState.queued_messages`` (``state``: read only)."""

    def __init__(self, view: View, records: Records, stream: ReplyStream, front: FrontEnd) -> None:
        self._state, self._stream, self._front_end = view.state, stream, front
        self._ledger, self._events, self._tally = records.ledger, records.events, records.tally
        self._dedup = records.dedup
        #: Update ids of the messages applied in the turn in flight.
        self._riding: list[str] = []

    # --- the send_message update -----------------------------------------------------

    async def wait_for_turn(self, message: SendMessageInput, mode: WhileBusy) -> TurnResult:
        """Queue ``message`` (the gate said it waits) and return the result of the turn
        that answers it."""
        info = workflow.current_update_info()
        update_id = info.id if info else f"message-{message.message_id}"
        queue = self._state.queued_messages
        queue.append(
            QueuedMessage(
                update_id=update_id,
                message_id=message.message_id,
                text=message.text,
                user_id=message.user_id,
                while_busy="interrupt" if mode == "interrupt" else "enqueue",
                queued_at=workflow.now(),
                run_id=message.run_id,
                context=message.context,
                client_tools=message.client_tools,
            )
        )
        detail = {"message_id": message.message_id, "while_busy": mode, "position": len(queue)}
        self._ledger.audit("enqueued", message.user_id, detail=detail)
        return await self._dedup.park(update_id)

    # --- the run loop ----------------------------------------------------------------

    def next_ready(self) -> bool:
        """A queued message may start its turn: nothing is owed, nothing is ending."""
        state = self._state
        return bool(state.queued_messages) and not state.pending and not state.ended

    async def run_next(self, run_turn: Callable[..., Awaitable[TurnResult]]) -> None:
        """The oldest queued message becomes a turn (its update gets the result), under
        the run id and with the context its client gave."""
        queued = self._state.queued_messages[0]
        await run_turn(client=queued, opening=lambda: self._apply(1))

    def close(self) -> None:
        """The conversation ended: every waiting message is refused, and recorded."""
        for queued in self._state.queued_messages:
            refusal = ConversationEnded(
                f"the conversation ended before message {queued.message_id} had its turn; "
                "it was not applied"
            )
            self._dedup.refuse(queued.update_id, refusal)
            detail = {"message_id": queued.message_id, "reason": "the conversation ended"}
            self._ledger.audit("unqueued", "parley", detail=detail)
        self._state.queued_messages.clear()

    # --- the turn engine -------------------------------------------------------------

    async def call_model(
        self, call_model: Callable[..., Awaitable[AIMessage]], check_catalogue: bool
    ) -> AIMessage:
        """``call_model`` (one model call of the turn, ``TurnEngine._call_model``),
        cancelled and made again when an interrupting message comes while it runs.
        Interrupting messages that came before it (while a tool ran) are added first."""
        while True:
            self._apply(self._interrupting())
            if not workflow.patched(INTERRUPTIBLE_MODEL_CALLS):
                return await call_model(check_catalogue=check_catalogue)
            task = asyncio.create_task(call_model(check_catalogue=check_catalogue))
            try:
                await workflow.wait_condition(
                    lambda task=task: task.done() or self._interrupting() > 0  # type: ignore[misc]
                )
            except BaseException:  # the turn itself is cancelled: so is its model call
                task.cancel()
                raise
            if task.done():  # the reply came first: an interrupt waits for the next call
                return task.result()
            self._interrupt(task)
            await asyncio.wait([task])
            if not task.cancelled():
                task.exception()  # the cancelled call's failure is expected: retrieved

    def answered(self, result: TurnResult) -> None:
        """The turn in flight rests with ``result``: the result of every message it
        applied from the queue."""
        for update_id in self._riding:
            self._dedup.answer(update_id, result)
        self._riding.clear()

    def _interrupting(self) -> int:
        """How many queued messages an interrupt takes in: up to its last interrupting
        one (earlier ones go first, in order)."""
        queue = self._state.queued_messages
        return max((i + 1 for i, q in enumerate(queue) if q.while_busy == "interrupt"), default=0)

    def _interrupt(self, task: asyncio.Task[AIMessage]) -> None:
        """Cancel the model call in flight; say so before its messages are added."""
        taken = self._state.queued_messages[: self._interrupting()]
        by = [q for q in taken if q.while_busy == "interrupt"]
        self._stream.fail(INTERRUPTED)
        task.cancel()
        detail = {
            "message_ids": [q.message_id for q in taken],
            "model_call": self._state.counters.model_calls,
        }
        self._ledger.audit("interrupted", by[0].user_id, detail=detail)
        self._events.custom(INTERRUPTED_EVENT, {"messageIds": detail["message_ids"]})

    def _apply(self, count: int) -> None:
        """The first ``count`` queued messages enter the transcript, once each."""
        state = self._state
        if count:
            self._front_end.abandon()  # calls of front-end tools its client left unanswered
        for queued in state.queued_messages[:count]:
            detail = {"message_id": queued.message_id, "while_busy": queued.while_busy}
            self._ledger.enter(queued.text, queued.message_id, queued.user_id, detail)
            self._tally.turn()
            self._riding.append(queued.update_id)
        del state.queued_messages[:count]
