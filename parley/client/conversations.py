"""Talking to one conversation: send, decide, read its state and events, end it.

Client side (never imported by workflows). Every call goes through the typed handler
references of ``ConversationWorkflow`` and ``pydantic_data_converter``. A refusal by
the workflow surfaces as ``ConversationRefused`` (``parley.client.errors``); a call that
waits for a worker is watched (``parley.client.liveness``); listing reads visibility
(``parley.client.visibility``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from langchain_core.messages import AnyMessage
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from parley.client.errors import (
    OPEN_STATUSES,
    ConversationRefused,
    check_member,
    check_text,
    checked_user,
    checked_workflow_id,
    ended_refusal,
    refusal_of,
    unreadable,
)
from parley.client.liveness import LivenessWatch, NoWorker
from parley.client.starts import conversation_start, settle, start_options
from parley.client.stored import state_deleted, stored_messages
from parley.client.visibility import ConversationListing, ConversationSummary
from parley.config.settings import Settings
from parley.contracts import (
    PARLEY_PENDING_TOOLS,
    PARLEY_USER,
    ClientRun,
    ConversationSnapshot,
    DecideInput,
    Decision,
    EndInput,
    EventPage,
    EventsQuery,
    EventsWait,
    RevertInput,
    SendMessageInput,
    StateQuery,
    TurnResult,
    UndoInput,
    UndoResult,
)
from parley.contracts.busy import WhileBusy
from parley.contracts.conversation import RewindInput
from parley.contracts.errors import NOT_OWNER_MESSAGE, ErrorType
from parley.workflows.conversation import ConversationWorkflow

#: How an update (or an update-with-start) fails on the client's side; ``_refusal``
#: turns each into one ``ConversationRefused``.
UPDATE_FAILURES = (WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError)

#: A reader's verified groups (the gateway's, from an OpenID Connect token; none: the CLI).
Groups = Sequence[str]
#: An update under a fresh id (``Conversations.ending_update``): its request and result.
EndingRequest = TypeVar("EndingRequest", EndInput, RewindInput, UndoInput, RevertInput)
EndingResult = TypeVar("EndingResult", ConversationSnapshot, UndoResult, TurnResult)


class Conversations:
    """The one client API to conversations: each method pairs a workflow call with the
    refusal it turns into one clear line, and with the liveness watch it holds
    (``LivenessWatch``); listing is its ``ConversationListing``'s."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self._client = client
        self._settings = settings
        self._liveness = LivenessWatch(client, settings, self.handle)
        self._listing = ConversationListing(client)

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def temporal(self) -> Client:
        return self._client

    def handle(self, session_id: str) -> WorkflowHandle[ConversationWorkflow, object]:
        return self._client.get_workflow_handle_for(
            ConversationWorkflow.run, checked_workflow_id(session_id)
        )

    async def list(
        self, user_id: str, limit: int = 1_000, *, reviewing: bool = False, groups: Groups = ()
    ) -> list[ConversationSummary]:
        """The user's conversations (``ConversationListing.list``; no worker needed)."""
        return await self._listing.list(user_id, limit, reviewing=reviewing, groups=groups)

    async def workers_polling(self) -> bool:
        """Whether a worker has polled the task queue lately (``LivenessWatch``)."""
        return await self._liveness.workers_polling()

    async def send(
        self,
        session_id: str,
        user_id: str,
        text: str,
        message_id: str | None = None,
        *,
        reviewers: Sequence[str] = (),
        while_busy: WhileBusy | None = None,
        run: ClientRun | None = None,
        added_instructions: str | None = None,
    ) -> TurnResult:
        """Send a message, starting the conversation if it is new (update-with-start).
        ``reviewers`` (users who may read it and decide on its calls) apply only when
        this message starts the conversation. ``while_busy``: what the message does if a
        turn is running (None: the conversation's default, which a conversation takes
        from ``Settings.while_busy`` when this message starts it). ``run``: the client's
        run id and context for the turn (AG-UI). ``added_instructions``: SendMessageInput's."""
        user_id = checked_user(user_id)
        reviewers = sorted({checked_user(reviewer) for reviewer in reviewers} - {user_id})
        message_id = message_id or uuid.uuid4().hex[:16]  # 64 random bits: unique enough
        workflow_id = checked_workflow_id(session_id, subagent=False)
        begin = conversation_start(self._settings, session_id, user_id, reviewers)
        start = WithStartWorkflowOperation(
            ConversationWorkflow.run,
            begin,
            # A message to a conversation that runs joins it.
            **start_options(
                self._settings,
                workflow_id,
                begin,
                conflict=WorkflowIDConflictPolicy.USE_EXISTING,
                summary=f"Parley conversation {session_id}",
            ),
        )
        if text or not (run or {}).get("tool_results"):  # results alone need no text
            check_text(text, self._settings.max_message_bytes)
        retry_hint = (
            f"Your message (id {message_id}) waits in Temporal and applies if a worker "
            f"takes it soon; to be sure, send it again with --message-id {message_id} once "
            "a worker runs: the same id is never applied twice."
        )
        try:
            return await self._liveness.watch(
                session_id,
                self._client.execute_update_with_start_workflow(
                    ConversationWorkflow.send_message,
                    SendMessageInput(
                        text=text,
                        message_id=message_id,
                        user_id=user_id,
                        while_busy=while_busy,
                        added_instructions=added_instructions,
                        **(run or {}),
                    ),
                    start_workflow_operation=start,
                    id=f"message-{message_id}",
                ),
                retry_hint,
            )
        except WorkflowAlreadyStartedError as err:
            raise ConversationRefused(
                f"conversation {session_id} has ended; use a new session id",
                ErrorType.CONVERSATION_ENDED,
            ) from err
        except UPDATE_FAILURES as err:
            raise await self._refusal(err, session_id) from err
        finally:
            # Whatever ended the call (a result, a refusal, the liveness watch giving
            # up and cancelling it), read the start operation's outcome too.
            await settle(start)

    async def decide(
        self,
        session_id: str,
        user_id: str,
        decisions: Sequence[Decision],
        update_id: str | None = None,
        run: ClientRun | None = None,
        groups: Sequence[str] = (),
    ) -> TurnResult:
        """Answer the pending calls ``decisions`` name (the others keep waiting). The
        same ``update_id`` again returns the first result and runs nothing twice. By
        default the id is derived from the decisions, so running the same command again
        (after a timeout) attaches to the first call instead of deciding twice.

        Temporal cannot admit an update that no worker takes, so when none serves the
        task queue the decision is sent as the ``decide_signal`` signal instead: it is
        kept in history and applied once when a worker returns (one that no longer fits
        is recorded as refused, never dropped). That is said in one line
        (``ConversationRefused`` of type ``NoWorker``)."""
        update_id = update_id or _decision_id(user_id, decisions)
        request = DecideInput(
            decisions=list(decisions),
            decided_by=checked_user(user_id),
            groups=sorted(set(groups)),  # the gateway's, from a verified token
            **(run or {}),
        )
        try:
            if await self._any_worker_lately():
                return await self._liveness.watch(
                    session_id,
                    self.handle(session_id).execute_update(
                        ConversationWorkflow.decide, request, id=update_id
                    ),
                )
        except NoWorker:
            pass
        except UPDATE_FAILURES as err:
            raise await self._refusal(err, session_id) from err
        # The update id goes with it: the same command, sent again, gets its result.
        signalled = request.model_copy(update={"request_id": update_id})
        raise await self._decide_by_signal(session_id, signalled)

    async def undo(
        self, session_id: str, user_id: str, tool_call_ids: Sequence[str] = (), groups: Groups = ()
    ) -> UndoResult:
        """Take back approved calls in their undo window (none named: all ``user_id`` may
        undo): none runs, the model is told; a call that already ran is refused."""
        user_id, ids, groups = checked_user(user_id), list(tool_call_ids), sorted(set(groups))
        return await self.ending_update(
            session_id,
            ConversationWorkflow.undo,
            UndoInput(user_id=user_id, tool_call_ids=ids, groups=groups),
            "An undo needs a running worker; without one the call cannot run either.",
        )

    async def _any_worker_lately(self) -> bool:
        """Whether a worker has polled the task queue lately; if Temporal does not say,
        assume one has (the call itself will then say what is wrong)."""
        try:
            return await self._liveness.workers_polling()
        except RPCError:
            return True

    async def _decide_by_signal(self, session_id: str, request: DecideInput) -> ConversationRefused:
        """Send ``request`` as ``decide_signal`` (no worker needed: Temporal keeps it in
        history) and return the one line that says so. Only a member of an open
        conversation may: read from its search attributes, which need no worker."""
        handle = self.handle(session_id)
        try:
            description = await handle.describe()
            check_member(description, request.decided_by, request.groups, escalated=True)
            if description.status not in OPEN_STATUSES:
                raise ended_refusal(session_id)
            await handle.signal(ConversationWorkflow.decide_signal, request)
        except RPCError as err:
            raise await self._refusal(err, session_id) from err
        return ConversationRefused(
            f"{self._liveness.no_worker_line()} Your decision is kept: Temporal holds it and the "
            "conversation applies it once when a worker returns (a decided call never runs "
            "twice); run the same command again then to get its result.",
            ErrorType.NO_WORKER,
        )

    async def state(
        self, session_id: str, user_id: str, query: StateQuery | None = None
    ) -> ConversationSnapshot:
        """One page of the conversation (by default: the latest messages and audit
        entries). The workflow keeps the latest messages; ``transcript`` reads older ones.

        A closed workflow (ended, terminated, timed out...) is ``ended`` with nothing
        pending, whatever its last state said: a terminated run never wrote its end.
        With no worker to answer, one line says so (and what visibility tells) within
        ``worker_wait_seconds``. A reader's verified groups go in ``query.groups``."""
        query = (query or StateQuery(user_id=user_id)).model_copy(
            update={"user_id": checked_user(user_id)}
        )
        handle = self.handle(session_id)
        try:
            description = await handle.describe()
        except RPCError as err:
            raise await self._refusal(err, session_id) from err
        try:
            snapshot = await self._liveness.watch(
                session_id, handle.query(ConversationWorkflow.state, query), query=True
            )
        except NoWorker:
            raise await self._unreadable(session_id, query, description) from None
        except (RPCError, WorkflowQueryFailedError) as err:
            if isinstance(err, RPCError) and err.status == RPCStatusCode.FAILED_PRECONDITION:
                # Temporal's own "no poller seen" answer, when it comes before ours.
                raise await self._unreadable(session_id, query, description) from None
            closed = description.status not in OPEN_STATUSES
            if closed and (gone := await state_deleted(self._client, session_id)):
                raise gone from None  # its history refers to payloads retention deleted
            raise await self._refusal(err, session_id) from err
        if description.status not in OPEN_STATUSES:
            return snapshot.model_copy(update={"status": "ended", "pending": []})
        return snapshot

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
        kept, context = snapshot.transcript_offset, snapshot.model_context
        later = f"the later ones, from message {kept} on, are still read (parley show)"
        stored = await stored_messages(self._client, session_id, context, kept, later)
        older = stored[offset : min(offset + limit, snapshot.transcript_offset)]
        return (older + snapshot.transcript)[:limit]

    async def events(
        self, session_id: str, user_id: str, after: int = -1, limit: int = 500, groups: Groups = ()
    ) -> EventPage:
        request = EventsQuery(
            user_id=checked_user(user_id), after=after, limit=limit, groups=sorted(set(groups))
        )
        try:
            return await self._liveness.watch(
                session_id,
                self.handle(session_id).query(ConversationWorkflow.events, request),
                "The events are read once a worker runs.",
                query=True,
            )
        except (WorkflowQueryFailedError, RPCError) as err:
            raise await self._refusal(err, session_id) from err

    async def wait_for_events(
        self, session_id: str, user_id: str, after: int, groups: Groups = ()
    ) -> int:
        """Block until the conversation has an event after ``after`` (or ends, or hands
        over to a new run); return its latest offset. One call per conversation at a
        time is enough for any number of readers: the gateway shares it."""
        try:
            return await self.handle(session_id).execute_update(
                ConversationWorkflow.wait_for_events,
                EventsWait(user_id=checked_user(user_id), after=after, groups=sorted(set(groups))),
                id=f"events-{uuid.uuid4().hex[:16]}",
            )
        except UPDATE_FAILURES as err:
            raise await self._refusal(err, session_id) from err

    async def end(self, session_id: str, user_id: str) -> ConversationSnapshot:
        """End the conversation once in-flight handlers are done (an owner-checked
        update); pending calls are answered ``expired`` and never run."""
        return await self.ending_update(
            session_id,
            ConversationWorkflow.end,
            EndInput(user_id=checked_user(user_id)),
            "Run it again once a worker is running, or end it now with `parley end --force`.",
        )

    async def ending_update(
        self,
        session_id: str,
        update: Callable[[ConversationWorkflow, EndingRequest], Awaitable[EndingResult]],
        request: EndingRequest,
        no_worker_hint: str,
    ) -> EndingResult:
        """An update under a fresh id (``end``, ``rewind``, ``undo``): no worker answering
        is ``no_worker_hint``, a run that has ended is refused as ended."""
        update_id = f"{update.__name__}-{uuid.uuid4().hex[:16]}"
        try:
            return await self._liveness.watch(
                session_id,
                self.handle(session_id).execute_update(update, request, id=update_id),
                no_worker_hint,
            )
        except UPDATE_FAILURES as err:
            raise await self._refusal(
                err, session_id, ended=f"conversation {session_id} has ended"
            ) from err

    async def force_end(self, session_id: str, user_id: str, reason: str | None = None) -> None:
        """Terminate the conversation's workflow, whatever its state and with no worker.
        Only its owner may (``ParleyUser``, served without a worker). Nothing pending runs."""
        user_id = checked_user(user_id)
        handle = self.handle(session_id)
        try:
            description = await handle.describe()
        except RPCError as err:
            raise await self._refusal(err, session_id) from err
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
            raise await self._refusal(
                err, session_id, ended=f"conversation {session_id} has ended"
            ) from err

    async def _unreadable(
        self, session_id: str, query: StateQuery, description: WorkflowExecutionDescription
    ) -> ConversationRefused:
        check_member(description, query.user_id, query.groups)
        pending_ids: list[str] = []
        if description.status in OPEN_STATUSES:
            tools = description.typed_search_attributes.get(PARLEY_PENDING_TOOLS) or []
            pending_ids = await self._listing.pending_from_history(description.id, list(tools))
        return unreadable(session_id, description, self._liveness.no_worker_line(), pending_ids)

    async def closed(self, session_id: str) -> bool:
        """Whether the conversation's workflow has closed: read from Temporal, no worker."""
        try:
            description = await self.handle(session_id).describe()
        except RPCError:
            return False
        return description.status not in OPEN_STATUSES

    async def _refusal(
        self, err: Exception, session_id: str, *, ended: str | None = None
    ) -> ConversationRefused:
        return await refusal_of(err, session_id, self.handle(session_id), ended=ended)


def _decision_id(user_id: str, decisions: Sequence[Decision]) -> str:
    """The same decisions by the same user, the same update id. Call ids are unique in
    a conversation, so equal decisions are one intent, never two, but for a call under a
    quorum approved again after an edit: surfaces pin ``args_hash``, which tells the two
    apart (an edit that changes nothing is refused there)."""
    ordered = sorted(
        (d.model_dump(mode="json") for d in decisions), key=lambda d: d["tool_call_id"]
    )
    digest = hashlib.sha256(json.dumps([user_id, ordered], sort_keys=True).encode()).hexdigest()
    return f"decide-{digest[:16]}"
