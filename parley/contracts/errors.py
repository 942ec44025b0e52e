"""Parley's error hierarchy and the stable ``ApplicationError`` types it maps to.

Both sides of the Temporal boundary import this module: tools and activities raise the
exceptions, the workflow reads the ``type`` strings. Nothing here does I/O.

Exceptions a tool (or the HTTP/git layer under it) raises::

    ParleyError
     ├── ToolInputError          the model's input was wrong: it can fix it (HTTP 400/404/
     │                           409/422, schema, bad slug). The model sees
     │                           "Error: <msg>\\n Please fix your mistakes."
     ├── ToolPermissionError     refused (PermissionError, HTTP 401/403, protected branch,
     │                           alias gone). Model sees a neutral "Error: <msg>".
     ├── TransientError          worth retrying (HTTP 408/429/5xx, timeouts, connection errors);
     │                           ``retry_after`` is honoured. Temporal retries, bounded.
     └── ModelRequestError       the model provider refused the request itself (400/401/403/404,
          │                      context overflow): the turn fails with a clear message.
          ├── ContextLengthExceeded  the request was past the model's context window
          │                      (OpenAI's ``400 context_length_exceeded``); ``window``
          │                      is the provider's figure when it gave one.
          └── ModelReplyTooLarge     the reply passed what one model call may return
                                 (``PARLEY_MAX_MODEL_REPLY_BYTES``, or too many tool
                                 calls): never retried, the turn fails in one line.

Anything else a tool raises (ValueError, TypeError, RuntimeError, ...) is a programming
error: the activity fails without retry and the turn fails closed.

Python's own ``PermissionError`` counts as a ``ToolPermissionError`` and LangChain's
``ToolException`` as a ``ToolInputError``: tools written without Parley in mind still
land in the right row of the table.
"""

from __future__ import annotations

from typing import Any, ClassVar

from temporalio.exceptions import ApplicationError


class ErrorType:
    """Every error type Parley names: the ``ApplicationError.type`` of a failure, the
    ``error_type`` of a ``ConversationRefused`` and the ``error.type`` of a gateway
    answer. No other module writes one as a string literal.

    ``temporalio.contrib.deepagents`` keeps its names in one place and marks them as its
    own (``"deepagents.invoke_model"``, ``"DeepAgentsUnknownTool"``). Parley does the
    first (this class, grouped by who raises them) but keeps its values unprefixed:
    they are stored and shown. An activity's failure type is in every workflow history
    (``tests/histories`` replays ``ToolInputError`` and ``ToolFailed``, and the workflow
    branches on them, so a renamed value would replay differently), in the audit log and
    in the gateway's and ``--json`` answers clients compare against. A value, once
    written, never changes; a new one is added here.
    """

    TOOL_INPUT = "ToolInputError"
    TOOL_PERMISSION = "ToolPermissionError"
    TOOL_TRANSIENT = "ToolTransientError"
    TOOL_FAILED = "ToolFailed"
    MODEL_TRANSIENT = "ModelTransientError"
    MODEL_REQUEST = "ModelRequestError"
    MODEL_FAILED = "ModelFailed"
    #: A ModelRequestError of its own: past the model's context window (never retried
    #: as is; the caller may retry with a shorter context).
    CONTEXT_LENGTH_EXCEEDED = "ContextLengthExceeded"
    #: A ModelRequestError of its own: the reply passed what one model call may return
    #: (its size, or the tool calls it proposes); never retried.
    MODEL_REPLY_TOO_LARGE = "ModelReplyTooLarge"
    # Refusals of a workflow update or query (validators and handlers).
    NOT_OWNER = "NotConversationOwner"
    TURN_IN_PROGRESS = "TurnInProgress"
    DECISIONS_OWED = "DecisionsOwed"
    NO_DECISIONS_OWED = "NoDecisionsOwed"
    INVALID_DECISION = "InvalidDecision"
    INVALID_MESSAGE = "InvalidMessage"
    MESSAGE_TOO_LARGE = "MessageTooLarge"
    CONVERSATION_ENDED = "ConversationEnded"
    HANDING_OVER = "ConversationHandingOver"
    NO_WORKER = "NoWorker"
    # Refusals the client makes before or instead of a workflow call.
    NOT_FOUND = "NotFound"
    UNREACHABLE = "Unreachable"
    INVALID_SESSION = "InvalidSession"
    INVALID_USER = "InvalidUser"
    #: The audit archive in the payload store cannot be read, or is not the one the
    #: conversation chained its entries to (``parley.client.audit``).
    AUDIT_UNREADABLE = "AuditUnreadable"
    #: What the conversation stored in the payload store (older messages, audit entries,
    #: large payloads its history refers to) was deleted by retention (``parley store
    #: gc``); the refusal says when (the gateway answers 410 Gone).
    DELETED_BY_RETENTION = "DeletedByRetention"
    #: A stored transcript segment the payload store cannot give back, and retention has
    #: no record of deleting it (most often: a store other than the one that wrote it).
    STORE_UNREADABLE = "StoreUnreadable"
    # A turn that could not come to rest.
    MODEL_CALL_LIMIT = "ModelCallLimitReached"
    #: The run's history came near Temporal's limit within one turn: the turn stopped.
    HISTORY_LIMIT = "HistoryLimitReached"
    #: The conversation added to the agent's instructions on a worker that does not
    #: allow it (``PARLEY_ALLOW_ADDED_INSTRUCTIONS``): its turns fail in one line.
    INSTRUCTIONS_REFUSED = "InstructionsRefused"
    # Tool results that are not a tool's own answer.
    NOT_RUN = "NotRun"
    TOOL_REPORTED_FAILURE = "ToolReportedFailure"
    RESULT_TOO_LARGE = "ToolResultTooLarge"
    RESULT_UNSTORABLE = "ToolResultUnstorable"
    # A subagent's conversation that ended without a reply (failed, cancelled, gone).
    SUBAGENT_FAILED = "SubagentFailed"
    # A reviewer's webhook that did not answer (the audit log records it).
    NOTIFICATION_FAILED = "NotificationFailed"
    # What the client tells of a Temporal failure that is no refusal of the workflow's.
    TEMPORAL_REFUSED = "RPCError"
    QUERY_FAILED = "QueryFailed"
    STILL_RUNNING = "StillRunning"
    # The gateway's answers to a request it cannot take (``{"error": {"type": ...}}``).
    UNAUTHENTICATED = "Unauthenticated"
    INVALID_REQUEST = "InvalidRequest"
    REQUEST_TOO_LARGE = "RequestTooLarge"
    #: A refusal that carried no type of its own.
    REFUSED = "Refused"
    #: An AG-UI run whose turn failed (``RunErrorEvent.code``).
    TURN_FAILED = "TurnFailed"


class Refusal(ApplicationError):
    """A workflow update or query refused: what was wrong and what to do. Never retried;
    its ``type`` is the class's stable ``ErrorType``, which clients compare against."""

    error_type: ClassVar[str]

    def __init__(self, message: str) -> None:
        super().__init__(message, type=self.error_type, non_retryable=True)


#: The one text of a ``NotOwner`` refusal: it names no one. (A failed query carries
#: only its message, so clients recognise the refusal by it.)
NOT_OWNER_MESSAGE = "this conversation belongs to another user"


class NotOwner(Refusal):
    error_type = ErrorType.NOT_OWNER


class ConversationEnded(Refusal):
    error_type = ErrorType.CONVERSATION_ENDED


class ConversationHandingOver(Refusal):
    """A ``wait_for_events`` that arrived while the run continues-as-new: wait again."""

    error_type = ErrorType.HANDING_OVER


class TurnInProgress(Refusal):
    error_type = ErrorType.TURN_IN_PROGRESS


class InvalidMessage(Refusal):
    error_type = ErrorType.INVALID_MESSAGE


class MessageTooLarge(Refusal):
    error_type = ErrorType.MESSAGE_TOO_LARGE


class DecisionsOwed(Refusal):
    error_type = ErrorType.DECISIONS_OWED


class NoDecisionsOwed(Refusal):
    error_type = ErrorType.NO_DECISIONS_OWED


class InvalidDecision(Refusal):
    error_type = ErrorType.INVALID_DECISION


#: What an HTTP status means, for a tool's REST backend (``parley.activities.http``) and a model
#: provider (``parley.activities.models.failures``) alike. 409 Conflict is an input error: the
#: request contradicts the server's state (a duplicate, an idempotency key reused with
#: another body), so the same request gets the same answer; the model or the user must
#: change it. (The OpenAI SDK would retry a 409; Parley does not.)
INPUT_STATUSES = frozenset({400, 404, 409, 422})
#: Retried with backoff, like every 5xx.
TRANSIENT_STATUSES = frozenset({408, 425, 429})
#: Codes in a provider's error body that mean "overloaded, retry" (any HTTP status): the
#: default of ``PARLEY_MODEL_OVERLOAD_CODES``.
OVERLOAD_CODES_DEFAULT = frozenset(
    {"2064", "overloaded", "overloaded_error", "server_overloaded", "engine_overloaded"}
)


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or 500 <= status <= 599


#: Activity failures the workflow answers with a model-visible ToolMessage.
MODEL_VISIBLE_TOOL_ERRORS = (ErrorType.TOOL_INPUT, ErrorType.TOOL_PERMISSION)


class ParleyError(Exception):
    """Base of every error Parley raises on purpose."""

    def __init__(self, message: str, *, http_status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.body = body


class ToolInputError(ParleyError):
    """The tool's input was wrong in a way the model can correct."""


class ToolPermissionError(ParleyError):
    """The tool refused the action; said neutrally, it may not be the model's fault."""


class TransientError(ParleyError):
    """A failure worth retrying later; ``retry_after`` (seconds) comes from the server."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status, body=body)
        self.retry_after = retry_after


class ModelRequestError(ParleyError):
    """The model provider rejected the request; retrying the same request cannot help."""


class ContextLengthExceeded(ModelRequestError):
    """The request did not fit the model's context window; ``window`` (tokens) is the
    provider's own figure when its answer named one."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        body: Any = None,
        window: int | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status, body=body)
        self.window = window


class ModelReplyTooLarge(ModelRequestError):
    """The model's reply passed what one call may return: its size in bytes, or the
    number of tool calls it proposes (``parley.contracts.limits``)."""


def model_visible_text(error_type: str, message: str) -> str:
    """What the model reads for a tool error of ``error_type`` (design.md's error table)."""
    if error_type == ErrorType.TOOL_INPUT:
        return f"Error: {message}\n Please fix your mistakes."
    return f"Error: {message}"
