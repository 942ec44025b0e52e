"""The client's refusals: ``ConversationRefused``, the local checks made before anything
is sent, and the translation of a Temporal failure into one clear line.

Client side (never imported by workflows). A refusal by the workflow (not the owner,
decisions owed, bad decision...) surfaces as ``ConversationRefused`` carrying the
workflow's message and stable error type (``parley.contracts.errors.ErrorType``).
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from parley.contracts import (
    PARLEY_ESCALATED_TO,
    PARLEY_PENDING_TOOLS,
    PARLEY_REVIEWERS,
    PARLEY_STATUS,
    PARLEY_USER,
    SUBAGENT_SEPARATOR,
    SUBAGENT_SESSION_PATTERN,
    check_user_id,
    workflow_id_for,
)
from parley.contracts.errors import NOT_OWNER_MESSAGE, ErrorType
from parley.contracts.reviewers import names_of


class ConversationRefused(Exception):
    """The conversation refused a call; ``message`` says why and what to do."""

    def __init__(self, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


def check_text(text: str, max_bytes: int) -> None:
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
    checked_workflow_id(session_id)
    checked_user(user_id)


def checked_user(user_id: str) -> str:
    try:
        return check_user_id(user_id)
    except ValueError as err:
        raise ConversationRefused(str(err), ErrorType.INVALID_USER) from None


def checked_workflow_id(session_id: str, *, subagent: bool = True) -> str:
    """The workflow id of a conversation to read or decide on; a subagent's id
    (``<session>/<name>-<n>``) is accepted unless ``subagent`` is False (``send``:
    nobody may start, and so block, a conversation's subagent)."""
    if (
        not subagent
        and isinstance(session_id, str)
        and SUBAGENT_SESSION_PATTERN.fullmatch(session_id)
    ):
        parent = session_id.rpartition(SUBAGENT_SEPARATOR)[0]
        raise ConversationRefused(
            f"{session_id} is a subagent's conversation, working on a task for "
            f"conversation {parent}; it takes no messages. Write to {parent} instead.",
            ErrorType.INVALID_MESSAGE,
        )
    try:
        return workflow_id_for(session_id, subagent=subagent)
    except ValueError as err:
        raise ConversationRefused(str(err), ErrorType.INVALID_SESSION) from None


def refusal(err: Exception, session_id: str) -> ConversationRefused:
    """The one line a failed workflow call (update, query, RPC) turns into: the one
    translator from a Temporal failure to ``ConversationRefused``. It goes by the
    failure's kind, its gRPC status and its ``ApplicationError.type``, never by its text,
    with one exception: a failed query reaches the client as a message only (Temporal
    passes no failure type back from a query handler), so a query the workflow refused
    because the reader is no member is recognised by ``NOT_OWNER_MESSAGE``, the one text
    ``NotOwner`` is ever raised with."""
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND:
            # Also a call to a closed workflow: ``refusal_of`` tells which.
            return ConversationRefused(f"no conversation {session_id} exists", ErrorType.NOT_FOUND)
        if err.status == RPCStatusCode.UNAVAILABLE:
            # The cluster went away mid-call (the connection had been made): the caller
            # says what became of its request (``parley.cli.following``).
            return ConversationRefused(
                f"Temporal stopped answering ({err.message})", ErrorType.UNREACHABLE
            )
        return ConversationRefused(
            f"Temporal refused the call: {err.message}", ErrorType.TEMPORAL_REFUSED
        )
    if isinstance(err, WorkflowQueryFailedError):
        if err.message == NOT_OWNER_MESSAGE:
            return ConversationRefused(err.message, ErrorType.NOT_OWNER)
        return ConversationRefused(str(err), ErrorType.QUERY_FAILED)
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        return ConversationRefused(
            f"gave up waiting for conversation {session_id}; the turn goes on in Temporal: "
            "see its result with `parley show`",
            ErrorType.STILL_RUNNING,
        )
    cause = err.cause if isinstance(err, WorkflowUpdateFailedError) else None
    if isinstance(cause, ApplicationError):
        return ConversationRefused(cause.message, cause.type)
    return ConversationRefused(str(cause or err))


#: Temporal's statuses of a conversation that goes on (a continued run's successor is open).
OPEN_STATUSES = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


async def refusal_of(
    err: Exception, session_id: str, handle: WorkflowHandle, *, ended: str | None = None
) -> ConversationRefused:
    """``refusal`` of ``err`` for the conversation of ``handle``; Temporal says NOT_FOUND
    both for a workflow that never existed and for a call to a closed one, so describe it
    to tell which (``ended``: the line for a closed one, if not ``ended_refusal``'s)."""
    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        try:
            description = await handle.describe()
        except RPCError:
            return ConversationRefused(f"no conversation {session_id} exists", ErrorType.NOT_FOUND)
        if description.status in OPEN_STATUSES:  # it started right after the call
            return ConversationRefused(
                f"conversation {session_id} was not there yet; try again", ErrorType.NOT_FOUND
            )
        if ended:
            return ConversationRefused(ended, ErrorType.CONVERSATION_ENDED)
        return ended_refusal(session_id)
    return refusal(err, session_id)


def ended_refusal(session_id: str) -> ConversationRefused:
    return ConversationRefused(
        f"conversation {session_id} has ended; a decision or message is refused (start a new "
        "session to go on)",
        ErrorType.CONVERSATION_ENDED,
    )


def check_member(
    description: WorkflowExecutionDescription,
    user_id: str,
    groups: Sequence[str] = (),
    *,
    escalated: bool = False,
) -> None:
    """The owner or a reviewer (by name, or as a member of a reviewer ``group:<name>``),
    read from the search attributes (no worker needed); with ``escalated``, also a person
    a pending call was escalated to (``ParleyEscalatedTo``: a decision, which the
    workflow's gate then checks call by call). The same words as the workflow's own
    refusal, which names no one."""
    attributes = description.typed_search_attributes
    members = set(attributes.get(PARLEY_REVIEWERS) or [])
    if escalated:
        members |= set(attributes.get(PARLEY_ESCALATED_TO) or [])
    if user_id != attributes.get(PARLEY_USER) and not names_of(user_id, groups) & members:
        raise ConversationRefused(NOT_OWNER_MESSAGE, ErrorType.NOT_OWNER)


def unreadable(
    session_id: str,
    description: WorkflowExecutionDescription,
    no_worker: str,
    pending_ids: list[str],
) -> ConversationRefused:
    """The one line for a conversation no worker can read (its reader is a member):
    what Temporal's description and visibility tell, and the pending calls' ids that
    its history tells, so a decision can still be given (and is kept)."""
    if description.status not in OPEN_STATUSES:
        return ConversationRefused(
            f"conversation {session_id} has ended; no worker runs to read its transcript",
            ErrorType.CONVERSATION_ENDED,
        )
    attributes = description.typed_search_attributes
    status = attributes.get(PARLEY_STATUS) or "idle"
    tools = attributes.get(PARLEY_PENDING_TOOLS) or []
    told = f" ({', '.join(tools)} pending)" if tools else ""
    if pending_ids:
        told += f"; a decision on {' '.join(pending_ids)} is kept until a worker returns"
    return ConversationRefused(
        f"{no_worker} Temporal's visibility says conversation {session_id} is {status}{told}.",
        ErrorType.NO_WORKER,
    )
