"""The data that crosses the Temporal boundary: workflow and activity inputs and outputs.

Imported by both sides (the workflow passes it through its sandbox), so it holds only
pydantic models, activity names and pure helpers: no I/O, no clocks, no randomness.
Every client (worker, CLI, tests, Replayer) carries them with
``parley.storage.data_converter`` (``pydantic_data_converter`` plus claim-check storage).
LangChain messages travel inside models typed :data:`Messages` so that
``AIMessage.tool_calls`` survive the round trip.

One module per part of the vocabulary (``names``, ``payloads``, ``tools``, ``model``,
``limits``, ``conversation``); import from this package, which re-exports them all.

History bytes are paid on every turn, so payloads are compact: :class:`PayloadConverter`
leaves out a contract's empty fields (:class:`Contract`), and :data:`Messages` a
message's empty fields. Both read back to the same values.
"""

from __future__ import annotations

from parley.contracts.conversation import (
    AuditEntry,
    ConversationSnapshot,
    ConversationStart,
    ConversationState,
    Counters,
    DecideInput,
    Decision,
    EndInput,
    EventPage,
    EventsQuery,
    EventsWait,
    NotifyInput,
    OffsetEvent,
    OnTimeout,
    PendingCall,
    RememberedDecision,
    SendMessageInput,
    StateQuery,
    ToolCall,
    TurnResult,
)
from parley.contracts.limits import (
    KEPT_AUDIT_ENTRIES,
    KEPT_EVENTS,
    KEPT_TRANSCRIPT_CHARS,
    KEPT_TRANSCRIPT_MESSAGES,
    MESSAGE_MAX_BYTES_DEFAULT,
    MODEL_RESULT_MAX_CHARS,
    PAGE_CHARS,
    PAYLOAD_PREVIEW_BYTES,
    PREVIEW_ARGS_CHARS,
    PREVIEW_CHARS,
    message_chars,
    model_view,
    turn_tool_result,
)
from parley.contracts.model import (
    CallModelInput,
    CallModelOutput,
    ContextRef,
)
from parley.contracts.names import (
    CALL_MODEL,
    NOTIFY,
    PARLEY_PENDING_TOOLS,
    PARLEY_STATUS,
    PARLEY_USER,
    RUN_TOOL,
    SEARCH_ATTRIBUTES,
    SESSION_ID_PATTERN,
    USER_ID_PATTERN,
    WORKFLOW_ID_PREFIX,
    ConversationStatus,
    DecisionAction,
    ResultStatus,
    ToolPolicy,
    TurnStatus,
    call_summary,
    check_user_id,
    workflow_id_for,
)
from parley.contracts.payloads import (
    PAYLOAD_CONTEXT,
    CompactAIMessage,
    Contract,
    Messages,
    PayloadConverter,
)
from parley.contracts.policies import PolicyOutcome, PolicyRule, call_shape, evaluate
from parley.contracts.tools import (
    RunToolInput,
    RunToolOutput,
    ToolCatalogue,
    ToolContext,
    ToolErrorInfo,
    ToolResult,
    ToolSpec,
    TurnToolResult,
)

__all__ = [
    "CALL_MODEL",
    "KEPT_AUDIT_ENTRIES",
    "KEPT_EVENTS",
    "KEPT_TRANSCRIPT_CHARS",
    "KEPT_TRANSCRIPT_MESSAGES",
    "MESSAGE_MAX_BYTES_DEFAULT",
    "MODEL_RESULT_MAX_CHARS",
    "NOTIFY",
    "PAGE_CHARS",
    "PARLEY_PENDING_TOOLS",
    "PARLEY_STATUS",
    "PARLEY_USER",
    "PAYLOAD_CONTEXT",
    "PAYLOAD_PREVIEW_BYTES",
    "PREVIEW_ARGS_CHARS",
    "PREVIEW_CHARS",
    "RUN_TOOL",
    "SEARCH_ATTRIBUTES",
    "SESSION_ID_PATTERN",
    "USER_ID_PATTERN",
    "WORKFLOW_ID_PREFIX",
    "AuditEntry",
    "CallModelInput",
    "CallModelOutput",
    "CompactAIMessage",
    "ContextRef",
    "Contract",
    "ConversationSnapshot",
    "ConversationStart",
    "ConversationState",
    "ConversationStatus",
    "Counters",
    "DecideInput",
    "Decision",
    "DecisionAction",
    "EndInput",
    "EventPage",
    "EventsQuery",
    "EventsWait",
    "Messages",
    "NotifyInput",
    "OffsetEvent",
    "OnTimeout",
    "PayloadConverter",
    "PendingCall",
    "PolicyOutcome",
    "PolicyRule",
    "RememberedDecision",
    "ResultStatus",
    "RunToolInput",
    "RunToolOutput",
    "SendMessageInput",
    "StateQuery",
    "ToolCall",
    "ToolCatalogue",
    "ToolContext",
    "ToolErrorInfo",
    "ToolPolicy",
    "ToolResult",
    "ToolSpec",
    "TurnResult",
    "TurnStatus",
    "TurnToolResult",
    "call_shape",
    "call_summary",
    "check_user_id",
    "evaluate",
    "message_chars",
    "model_view",
    "turn_tool_result",
    "workflow_id_for",
]
