"""The data that crosses the Temporal boundary: workflow and activity inputs and outputs.

Imported by both sides (the workflow passes it through its sandbox), so it holds only
pydantic models, activity names and pure helpers: no I/O, no clocks, no randomness.
Every client (worker, CLI, tests, Replayer) uses ``pydantic_data_converter`` to carry
these. LangChain messages travel inside models typed ``list[AnyMessage]`` so that
``AIMessage.tool_calls`` survive the round trip.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage
from pydantic import BaseModel, Field, field_validator, model_validator
from temporalio.common import SearchAttributeKey

# Activity names: shared by the workflow, the worker and the tests' fakes.
CALL_MODEL = "parley.call_model"
RUN_TOOL = "parley.run_tool"
DESCRIBE_TOOLS = "parley.describe_tools"

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
WORKFLOW_ID_PREFIX = "conversation-"

ToolPolicy = Literal["auto", "confirm", "deny"]
ConversationStatus = Literal["running", "awaiting_approval", "idle", "failed", "ended"]
TurnStatus = Literal["completed", "awaiting_approval", "failed"]
ResultStatus = Literal["success", "error", "rejected", "expired"]
DecisionAction = Literal["approve", "edit", "reject", "respond"]


def workflow_id_for(session_id: str) -> str:
    """The workflow id of a conversation; refuses a malformed session id."""
    if not SESSION_ID_PATTERN.match(session_id):
        raise ValueError(
            f"session id {session_id!r} is not valid: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )
    return WORKFLOW_ID_PREFIX + session_id


def check_user_id(user_id: str | None) -> str:
    """The user id every conversation needs; empty or ``default`` is refused (F8)."""
    if user_id is None or not user_id.strip():
        raise ValueError("a user id is required (pass --user or user_id)")
    if user_id.strip().lower() == "default":
        raise ValueError("'default' is not a user id: pass the real user's id")
    return user_id.strip()


def call_summary(name: str, args: dict[str, Any], limit: int = 120) -> str:
    """One line naming a tool call, e.g. ``git_push_branch repo_alias=web branch=feat/x``."""
    parts = [name]
    for key, value in args.items():
        if isinstance(value, str | int | float | bool):
            text = str(value).replace("\n", " ")
            parts.append(f"{key}={text[:40]}")
    return " ".join(parts)[:limit]


# --- tools ------------------------------------------------------------------------


class ToolSpec(BaseModel):
    """What the workflow knows of a tool: enough to validate args and apply its policy."""

    name: str
    description: str
    policy: ToolPolicy
    args_schema: dict[str, Any]


class ToolCatalogue(BaseModel):
    tools: list[ToolSpec]

    def get(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class ToolContext(BaseModel):
    """Who a tool acts for, given to tools that declare ``context: InjectedToolArg``."""

    user_id: str
    session_id: str
    workflow_id: str
    tool_call_id: str

    @property
    def idempotency_key(self) -> str:
        """Stable across activity retries, so a retried write never happens twice."""
        return f"{self.workflow_id}:{self.tool_call_id}"


class ToolErrorInfo(BaseModel):
    type: str
    message: str
    http_status: int | None = None
    body: Any = None


class ToolResult(BaseModel):
    """The one envelope of a tool result: for the model, the events and the audit log."""

    status: ResultStatus
    content: str
    payload: Any = None
    error: ToolErrorInfo | None = None


class RunToolInput(BaseModel):
    name: str
    args: dict[str, Any]
    context: ToolContext
    #: Who approved (or edited) this call; set only by a ``decide``. The worker refuses
    #: a ``confirm`` tool without it, whatever the workflow's catalogue said.
    approved_by: str | None = None


class RunToolOutput(BaseModel):
    """A successful run; a failure is raised as an ``ApplicationError`` instead."""

    result: ToolResult


# --- model ------------------------------------------------------------------------


class CallModelInput(BaseModel):
    """Small on purpose: the activity reads the transcript with a query, not from history."""

    workflow_id: str
    transcript_length: int
    session_id: str
    user_id: str


class CallModelOutput(BaseModel):
    message: AIMessage


class TranscriptQuery(BaseModel):
    user_id: str
    upto: int


class TranscriptPage(BaseModel):
    messages: list[AnyMessage]


# --- conversation -----------------------------------------------------------------


class ConversationStart(BaseModel):
    session_id: str
    user_id: str
    pending_expiry_seconds: float = Field(default=24 * 3600, gt=0, le=10 * 365 * 24 * 3600)
    max_model_calls_per_turn: int = Field(default=8, ge=1)
    #: Continue-as-new (between turns) once this run's history is this long.
    continue_as_new_after_events: int = Field(default=10_000, ge=1)
    #: Set only by continue-as-new: everything the previous run held.
    carried_state: ConversationState | None = None

    @field_validator("user_id")
    @classmethod
    def _user(cls, value: str) -> str:
        return check_user_id(value)

    @field_validator("session_id")
    @classmethod
    def _session(cls, value: str) -> str:
        workflow_id_for(value)
        return value


class SendMessageInput(BaseModel):
    text: str
    message_id: str
    user_id: str


class Decision(BaseModel):
    tool_call_id: str
    action: DecisionAction
    args: dict[str, Any] | None = None
    message: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> Decision:
        if self.action == "edit" and self.args is None:
            raise ValueError(f"edit of {self.tool_call_id} needs new args")
        if self.action == "respond" and not (self.message or "").strip():
            raise ValueError(f"respond to {self.tool_call_id} needs a message")
        return self


class DecideInput(BaseModel):
    decisions: list[Decision]
    decided_by: str


class PendingCall(BaseModel):
    tool_call_id: str
    name: str
    args: dict[str, Any]
    description: str
    expires_at: datetime


class TurnToolResult(BaseModel):
    tool_call_id: str
    name: str
    status: ResultStatus
    content: str
    payload: Any = None
    error: ToolErrorInfo | None = None


class TurnResult(BaseModel):
    session_id: str
    status: TurnStatus
    reply: str | None = None
    pending: list[PendingCall] = Field(default_factory=list)
    results: list[TurnToolResult] = Field(default_factory=list)
    error: str | None = None


class AuditEntry(BaseModel):
    at: datetime
    event: Literal[
        "message", "proposed", "refused", "decided", "ran", "failed", "expired", "turn_failed"
    ]
    actor: str
    tool_call_id: str | None = None
    name: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Counters(BaseModel):
    turns: int = 0
    model_calls: int = 0
    tool_runs: int = 0
    decisions: int = 0


class ConversationState(BaseModel):
    """The workflow's whole state: what continue-as-new carries and ``state()`` shows."""

    session_id: str
    user_id: str
    status: ConversationStatus = "idle"
    transcript: list[AnyMessage] = Field(default_factory=list)
    pending: list[PendingCall] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    counters: Counters = Field(default_factory=Counters)
    last_turn: TurnResult | None = None
    #: The worker's tools as of this conversation's latest turn (policies, schemas).
    tools: ToolCatalogue | None = None
    #: Results of the latest updates by update id, so a client's retry of a ``send`` or
    #: ``decide`` gets the first result even after continue-as-new (bounded).
    recent_results: dict[str, TurnResult] = Field(default_factory=dict)


class ConversationSnapshot(BaseModel):
    """What the ``state`` query returns: the state without the event log."""

    session_id: str
    user_id: str
    status: ConversationStatus
    pending: list[PendingCall]
    transcript: list[AnyMessage]
    audit: list[AuditEntry]
    counters: Counters
    event_count: int
    last_turn: TurnResult | None = None


class StateQuery(BaseModel):
    user_id: str


class EventsQuery(BaseModel):
    user_id: str
    after: int = -1


class OffsetEvent(BaseModel):
    """One AG-UI event (a JSON object) and its offset in the conversation's event log."""

    offset: int
    event: dict[str, Any]


class EventPage(BaseModel):
    """Events with offset > ``after``; pass ``next_after`` as ``after`` to read on."""

    events: list[OffsetEvent]
    next_after: int


ConversationStart.model_rebuild()


# --- Temporal UI ------------------------------------------------------------------

PARLEY_USER = SearchAttributeKey.for_keyword("ParleyUser")
PARLEY_STATUS = SearchAttributeKey.for_keyword("ParleyStatus")
PARLEY_PENDING_TOOLS = SearchAttributeKey.for_keyword_list("ParleyPendingTools")
SEARCH_ATTRIBUTES = (PARLEY_USER, PARLEY_STATUS, PARLEY_PENDING_TOOLS)
