"""Talking to conversations from outside Temporal: the CLI, the gateway and tests.

Client side (never imported by workflows). Every call goes through the typed handler
references of ``ConversationWorkflow`` and ``pydantic_data_converter``. A refusal by
the workflow (not the owner, decisions owed, bad decision...) surfaces as
``ConversationRefused`` carrying the workflow's message and stable error type.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
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
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from parley.contracts import (
    PARLEY_USER,
    ConversationSnapshot,
    ConversationStart,
    DecideInput,
    Decision,
    EventPage,
    EventsQuery,
    SendMessageInput,
    StateQuery,
    TurnResult,
    check_user_id,
    workflow_id_for,
)
from parley.errors import ErrorType
from parley.settings import Settings
from workflows.conversation import ConversationWorkflow


class ConversationRefused(Exception):
    """The conversation refused a call; ``message`` says why and what to do."""

    def __init__(self, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


async def connect(settings: Settings) -> Client:
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            data_converter=pydantic_data_converter,
        )
    except RuntimeError as err:
        raise ConversationRefused(
            f"cannot reach Temporal at {settings.temporal_address}: {err}. Is `parley dev` "
            "running, or TEMPORAL_ADDRESS set to your cluster?"
        ) from err


class Conversations:
    def __init__(self, client: Client, settings: Settings) -> None:
        self._client = client
        self._settings = settings

    def handle(self, session_id: str) -> WorkflowHandle[ConversationWorkflow, object]:
        return self._client.get_workflow_handle_for(
            ConversationWorkflow.run, _workflow_id(session_id)
        )

    async def send(
        self, session_id: str, user_id: str, text: str, message_id: str | None = None
    ) -> TurnResult:
        """Send a message, starting the conversation if it is new (update-with-start)."""
        user_id = _user(user_id)
        message_id = message_id or uuid.uuid4().hex
        workflow_id = _workflow_id(session_id)
        start = WithStartWorkflowOperation(
            ConversationWorkflow.run,
            ConversationStart(
                session_id=session_id,
                user_id=user_id,
                pending_expiry_seconds=self._settings.pending_expiry_seconds,
                max_model_calls_per_turn=self._settings.max_model_calls_per_turn,
                continue_as_new_after_events=self._settings.continue_as_new_after_events,
            ),
            id=workflow_id,
            task_queue=self._settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            # An ended conversation stays ended: a new message must not silently start
            # an empty one under the same id.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes([SearchAttributePair(PARLEY_USER, user_id)]),
            static_summary=f"Parley conversation {session_id}",
            static_details=f"Conversation `{session_id}`, started by update-with-start.",
        )
        try:
            return await self._client.execute_update_with_start_workflow(
                ConversationWorkflow.send_message,
                SendMessageInput(text=text, message_id=message_id, user_id=user_id),
                start_workflow_operation=start,
                id=f"message-{message_id}",
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
        result and runs nothing twice."""
        try:
            return await self.handle(session_id).execute_update(
                ConversationWorkflow.decide,
                DecideInput(decisions=list(decisions), decided_by=_user(user_id)),
                id=update_id or f"decide-{uuid.uuid4().hex}",
            )
        except (
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
            RPCError,
        ) as err:
            raise _refusal(err, session_id) from err

    async def state(self, session_id: str, user_id: str) -> ConversationSnapshot:
        try:
            return await self.handle(session_id).query(
                ConversationWorkflow.state, StateQuery(user_id=_user(user_id))
            )
        except (WorkflowQueryFailedError, RPCError) as err:
            raise _refusal(err, session_id) from err

    async def events(self, session_id: str, user_id: str, after: int = -1) -> EventPage:
        try:
            return await self.handle(session_id).query(
                ConversationWorkflow.events, EventsQuery(user_id=_user(user_id), after=after)
            )
        except (WorkflowQueryFailedError, RPCError) as err:
            raise _refusal(err, session_id) from err

    async def end(self, session_id: str, user_id: str) -> ConversationSnapshot:
        """Ask the conversation to finish once in-flight handlers are done."""
        snapshot = await self.state(session_id, user_id)  # refuses another user
        if snapshot.status == "ended":
            raise ConversationRefused(
                f"conversation {session_id} has ended", ErrorType.CONVERSATION_ENDED
            )
        try:
            await self.handle(session_id).signal(ConversationWorkflow.end)
        except RPCError as err:  # it ended between the query and the signal
            raise _refusal(err, session_id, ended=f"conversation {session_id} has ended") from err
        return snapshot


def check_identity(session_id: str, user_id: str) -> None:
    """Refuse a malformed session or user id locally, before contacting Temporal."""
    _workflow_id(session_id)
    _user(user_id)


def _user(user_id: str) -> str:
    try:
        return check_user_id(user_id)
    except ValueError as err:
        raise ConversationRefused(str(err), "InvalidUser") from None


def _workflow_id(session_id: str) -> str:
    try:
        return workflow_id_for(session_id)
    except ValueError as err:
        raise ConversationRefused(str(err), "InvalidSession") from None


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
            return ConversationRefused(f"no conversation {session_id} exists", "NotFound")
        return ConversationRefused(f"Temporal refused the call: {err.message}", "RPCError")
    if isinstance(err, WorkflowQueryFailedError):
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
