"""The data that crosses the Temporal boundary: workflow and activity inputs and outputs.

Imported by both sides (the workflow passes it through its sandbox), so it holds only
pydantic models, activity names and pure helpers: no I/O, no clocks, no randomness.
Every client (worker, CLI, tests, Replayer) carries them with
``parley.storage.data_converter`` (``pydantic_data_converter`` plus claim-check storage).
LangChain messages travel inside models typed :data:`Messages` so that
``AIMessage.tool_calls`` survive the round trip.

History bytes are paid on every turn, so payloads are compact: :class:`PayloadConverter`
leaves out a contract's empty fields (:class:`Contract`), and :data:`Messages` a
message's empty fields. Both read back to the same values.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any, Literal

import pydantic_core
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from pydantic import (
    BaseModel,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from temporalio.api.common.v1 import Payload
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
)

# Activity names: shared by the workflow, the worker and the tests' fakes.
CALL_MODEL = "parley.call_model"
RUN_TOOL = "parley.run_tool"

#: Matched against the whole string (``\A``/``\Z``): ``$`` would accept "abc\n".
SESSION_ID_PATTERN = re.compile(r"\A[A-Za-z0-9._-]{1,128}\Z")
#: A user id: 1-128 characters, none of them whitespace or control characters.
USER_ID_PATTERN = re.compile(r"\A[^\s\x00-\x1f\x7f-\x9f]{1,128}\Z")
WORKFLOW_ID_PREFIX = "conversation-"

ToolPolicy = Literal["auto", "confirm", "deny"]
ConversationStatus = Literal["running", "awaiting_approval", "idle", "failed", "ended"]
TurnStatus = Literal["completed", "awaiting_approval", "failed"]
ResultStatus = Literal["success", "error", "rejected", "expired"]
DecisionAction = Literal["approve", "edit", "reject", "respond"]


def workflow_id_for(session_id: str) -> str:
    """The workflow id of a conversation; refuses a malformed session id."""
    if not isinstance(session_id, str) or not SESSION_ID_PATTERN.fullmatch(session_id):
        raise ValueError(
            f"session id {session_id!r} is not valid: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )
    return WORKFLOW_ID_PREFIX + session_id


def check_user_id(user_id: str | None) -> str:
    """The user id every conversation needs; empty or ``default`` is refused (F8)."""
    if user_id is None or not user_id.strip():
        raise ValueError("a user id is required (pass --user or user_id)")
    if not USER_ID_PATTERN.fullmatch(user_id):
        raise ValueError(
            f"user id {user_id[:40]!r} is not valid: use 1-128 characters with no spaces "
            "or control characters"
        )
    if user_id.lower() == "default":
        raise ValueError("'default' is not a user id: pass the real user's id")
    return user_id


def call_summary(name: str, args: dict[str, Any], limit: int = 120) -> str:
    """One line naming a tool call, e.g. ``git_push_branch repo_alias=web branch=feat/x``."""
    parts = [name]
    for key, value in args.items():
        if isinstance(value, str | int | float | bool):
            text = str(value).replace("\n", " ")
            parts.append(f"{key}={text[:40]}")
    return " ".join(parts)[:limit]


# --- compact JSON -----------------------------------------------------------------


#: The serialization context of every payload (:class:`PayloadConverter`). Only there
#: does a :class:`Contract` leave out its empty fields: what users read (``--json``
#: output, AG-UI events) keeps every key.
PAYLOAD_CONTEXT = {"parley": "payload"}


class Contract(BaseModel):
    """Base of every payload type. In a payload (and only there) a field left at its
    empty default (None, or ``[]`` from ``default_factory=list``) is left out; reading
    it back gives the default again. History does not pay for ``"error": null`` on
    every turn."""

    @model_serializer(mode="wrap")
    def _without_empty_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if info.mode_is_json() and info.context == PAYLOAD_CONTEXT and isinstance(data, dict):
            for name, field in type(self).model_fields.items():
                if name not in data:
                    continue
                if (field.default is None and data[name] is None) or (
                    field.default_factory is list and data[name] == []
                ):
                    del data[name]
            if isinstance(self, _ContentOfPayload) and "payload" in data:
                if data.get("content") == _payload_json(data["payload"]):
                    del data["content"]  # rebuilt on reading, see _ContentOfPayload
        return data


def _payload_json(payload: Any) -> str:
    """A tool's JSON result as its content (``activities.tool_calls.envelope_of``)."""
    return json.dumps(payload, ensure_ascii=False)


class _ContentOfPayload(Contract):
    """A result with ``content`` and ``payload``, where content is most often the
    payload's JSON (a tool that returns a dict). In a payload that content is left out
    and rebuilt on reading, so a 20 KB result costs 20 KB of history, not 40."""

    @model_validator(mode="before")
    @classmethod
    def _content_from_payload(cls, data: Any) -> Any:
        if isinstance(data, dict) and "content" not in data and data.get("payload") is not None:
            return {**data, "content": _payload_json(data["payload"])}
        return data


class _CompactJSONConverter(PydanticJSONPlainPayloadConverter):
    """``json/plain`` as pydantic writes it, in :data:`PAYLOAD_CONTEXT`."""

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(
            metadata={"encoding": self.encoding.encode()},
            data=pydantic_core.to_json(value, context=PAYLOAD_CONTEXT),
        )


class PayloadConverter(PydanticPayloadConverter):
    """``pydantic_data_converter``'s payload converter with compact contracts (see
    :class:`Contract`); reading is unchanged, so it reads any pydantic-written payload."""

    def __init__(self) -> None:
        super().__init__()
        compact = _CompactJSONConverter()
        self._set_converters(
            *(compact if c.encoding == compact.encoding else c for c in self.converters.values())
        )


def _compact_message(message: BaseMessage) -> dict[str, Any]:
    """A message's JSON without its empty fields (None, ``{}``, ``[]``: each one's
    default), keeping ``content`` and ``type`` (which selects the class on the way back)."""
    data = message.model_dump(mode="json")
    return {
        key: value
        for key, value in data.items()
        if key in ("content", "type") or value not in (None, {}, [])
    }


#: LangChain messages as payloads carry them (see :func:`_compact_message`).
Messages = Annotated[
    list[AnyMessage],
    PlainSerializer(lambda messages: [_compact_message(m) for m in messages], when_used="json"),
]
CompactAIMessage = Annotated[AIMessage, PlainSerializer(_compact_message, when_used="json")]


# --- tools ------------------------------------------------------------------------


class ToolSpec(Contract):
    """What the workflow knows of a tool: enough to validate args and apply its policy."""

    name: str
    description: str
    policy: ToolPolicy
    args_schema: dict[str, Any]
    #: Whether arguments the schema does not name are accepted. Off unless the tool's
    #: schema says ``additionalProperties``: an edit cannot smuggle in ``"force": true``.
    extra_args_allowed: bool = False


class ToolCatalogue(Contract):
    tools: list[ToolSpec]
    #: A digest of ``tools``, set by the worker: the workflow asks for the catalogue
    #: again only when the worker's version differs.
    version: str = ""

    def get(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class ToolContext(Contract):
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
    """Part of the envelope: its four keys are always there, even in a payload."""

    type: str
    message: str
    http_status: int | None = None
    body: Any = None


class ToolResult(_ContentOfPayload):
    """The one envelope of a tool result: for the model, the events and the audit log.
    What clients read (events, ``--json``) always has its four keys."""

    status: ResultStatus
    content: str
    payload: Any = None
    error: ToolErrorInfo | None = None


class RunToolInput(Contract):
    """One tool call. The activity builds the tool's :class:`ToolContext` from these
    and its own workflow id, so the conversation's ids are not repeated in every input."""

    name: str
    args: dict[str, Any]
    tool_call_id: str
    user_id: str
    #: Who approved (or edited) this call; set only by a ``decide``. The worker refuses
    #: a ``confirm`` tool without it, whatever the workflow's catalogue said.
    approved_by: str | None = None


class RunToolOutput(Contract):
    """A successful run; a failure is raised as an ``ApplicationError`` instead."""

    result: ToolResult


# --- model ------------------------------------------------------------------------


class ContextRef(Contract):
    """Where the model's transcript so far is stored (``parley.storage``'s chain): the
    store's small claim (every process uses the one ``PARLEY_PAYLOAD_STORE``) and how
    many messages it covers."""

    claim: dict[str, str]
    length: int


class CallModelInput(Contract):
    """Bounded whatever the conversation's length: the transcript so far travels as a
    reference, only the messages added since the previous model call as values."""

    context: ContextRef | None = None
    new_messages: Messages = Field(default_factory=list)
    #: Set on the first model call of each turn: the version of the tool catalogue the
    #: workflow holds ("" for none). The reply carries the worker's catalogue when it
    #: differs. None (later calls of a turn): no check; a deploy is seen next turn.
    catalogue_version: str | None = None


class CallModelOutput(Contract):
    message: CompactAIMessage
    #: The transcript including ``message``.
    context: ContextRef
    catalogue: ToolCatalogue | None = None


# --- conversation -----------------------------------------------------------------

#: Limits on what a conversation keeps in memory and in one payload. They bound the
#: workflow's state (so the continue-as-new input), every query page and update result.
MESSAGE_MAX_BYTES_DEFAULT = 1024 * 1024
#: A tool result longer than this reaches the model truncated, with a note saying so.
MODEL_RESULT_MAX_CHARS = 32_000
#: Content and payload previews in a ``TurnResult``, an event or an audit entry.
PREVIEW_CHARS = 4_000
PAYLOAD_PREVIEW_BYTES = 16 * 1024
#: Tool arguments shown in the Temporal UI's current details and in audit entries.
PREVIEW_ARGS_CHARS = 2_000
#: What the workflow keeps in memory: older messages are in the transcript chain,
#: older audit entries and events in the histories of earlier runs.
KEPT_TRANSCRIPT_MESSAGES = 200
KEPT_TRANSCRIPT_CHARS = 512 * 1024
KEPT_AUDIT_ENTRIES = 1_000
KEPT_EVENTS = 2_000
#: A query page's budget of characters (its messages or entries).
PAGE_CHARS = 512 * 1024


class ConversationStart(Contract):
    session_id: str
    user_id: str
    pending_expiry_seconds: float = Field(default=24 * 3600, gt=0, le=10 * 365 * 24 * 3600)
    max_model_calls_per_turn: int = Field(default=8, ge=1)
    #: Continue-as-new (between turns, after at least one turn in the run) once this
    #: run's history is this long.
    continue_as_new_after_events: int = Field(default=10_000, ge=1)
    #: A message longer than this (UTF-8 bytes) is refused before it enters history.
    max_message_bytes: int = Field(default=MESSAGE_MAX_BYTES_DEFAULT, ge=1, le=64 * 1024 * 1024)
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


class SendMessageInput(Contract):
    text: str
    message_id: str
    user_id: str


class Decision(Contract):
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


class DecideInput(Contract):
    decisions: list[Decision]
    decided_by: str


class EndInput(Contract):
    user_id: str


class ToolCall(Contract):
    """A tool call as the workflow handles it, from the model's proposal to its answer."""

    tool_call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, proposed: Any) -> ToolCall:
        """From LangChain's tool-call dict (``AIMessage.tool_calls``)."""
        return cls(tool_call_id=proposed["id"] or "", name=proposed["name"], args=proposed["args"])


class PendingCall(ToolCall):
    """A ``confirm`` call waiting for a decision."""

    description: str
    expires_at: datetime


class TurnToolResult(_ContentOfPayload):
    """A tool result as a turn reports it: the envelope, with content cut to
    ``PREVIEW_CHARS`` and a payload over ``PAYLOAD_PREVIEW_BYTES`` left out (both say
    so), so that an update result stays small whatever the tool returned."""

    tool_call_id: str
    name: str
    status: ResultStatus
    content: str
    payload: Any = None
    error: ToolErrorInfo | None = None
    #: The length of the whole content, when ``content`` is a preview.
    content_chars: int | None = None
    #: The size of the payload (JSON bytes), when it was left out.
    payload_omitted_bytes: int | None = None


class TurnResult(Contract):
    """Where a turn came to rest. (The caller knows which conversation it addressed.)"""

    status: TurnStatus
    reply: str | None = None
    pending: list[PendingCall] = Field(default_factory=list)
    results: list[TurnToolResult] = Field(default_factory=list)
    error: str | None = None


class AuditEntry(Contract):
    at: datetime
    event: Literal[
        "message",
        "proposed",
        "refused",
        "decided",
        "ran",
        "failed",
        "expired",
        "turn_failed",
        "ended",
    ]
    actor: str
    tool_call_id: str | None = None
    name: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Counters(Contract):
    turns: int = 0
    model_calls: int = 0
    tool_runs: int = 0
    decisions: int = 0
    continued_as_new: int = 0


class ConversationState(Contract):
    """The workflow's whole state: what continue-as-new carries and ``state()`` pages.

    Bounded whatever the conversation's length: the transcript, the audit log and the
    event log keep their latest entries (``KEPT_*``), each with the absolute offset of
    its first kept entry. Older messages are in the transcript chain (``model_context``).
    """

    session_id: str
    user_id: str
    status: ConversationStatus = "idle"
    ended: bool = False
    #: The latest messages; ``transcript[0]`` is message number ``transcript_offset``.
    transcript: Messages = Field(default_factory=list)
    transcript_offset: int = 0
    #: The stored transcript as of the latest model call: messages before
    #: ``model_context.length`` are in the store, the rest go with the next call.
    model_context: ContextRef | None = None
    pending: list[PendingCall] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    audit_offset: int = 0
    events: list[dict[str, Any]] = Field(default_factory=list)
    events_offset: int = 0
    runs: int = 0
    #: Whether a turn is in flight (never true when continue-as-new carries the state).
    turn_running: bool = False
    #: The results the turn in flight has given so far (its ``TurnResult.results``).
    turn_results: list[TurnToolResult] = Field(default_factory=list)
    counters: Counters = Field(default_factory=Counters)
    last_turn: TurnResult | None = None
    #: The worker's tools as of this conversation's latest model call (policies, schemas).
    tools: ToolCatalogue | None = None
    #: Results of the latest updates by update id, so a client's retry of a ``send`` or
    #: ``decide`` gets the first result even after continue-as-new (bounded).
    recent_results: dict[str, TurnResult] = Field(default_factory=dict)

    @property
    def transcript_length(self) -> int:
        return self.transcript_offset + len(self.transcript)


class ConversationSnapshot(Contract):
    """What the ``state`` query returns: one page of the transcript and of the audit log
    (offsets are absolute), and everything else whole."""

    session_id: str
    user_id: str
    status: ConversationStatus
    pending: list[PendingCall]
    transcript: Messages
    transcript_offset: int = 0
    transcript_total: int = 0
    #: Where messages before the ones this process keeps can be read (``parley.storage``).
    model_context: ContextRef | None = None
    audit: list[AuditEntry]
    audit_offset: int = 0
    audit_total: int = 0
    counters: Counters
    event_count: int
    last_turn: TurnResult | None = None


class StateQuery(Contract):
    user_id: str
    #: The first message of the page (absolute); None: the page that ends with the latest.
    transcript_offset: int | None = None
    transcript_limit: int = Field(default=200, ge=0, le=1_000)
    audit_offset: int | None = None
    audit_limit: int = Field(default=200, ge=0, le=1_000)


class EventsQuery(Contract):
    user_id: str
    after: int = -1
    limit: int = Field(default=500, ge=1, le=5_000)


class OffsetEvent(Contract):
    """One AG-UI event (a JSON object) and its offset in the conversation's event log."""

    offset: int
    event: dict[str, Any]


class EventPage(Contract):
    """Events with offset > ``after``; pass ``next_after`` as ``after`` to read on.
    ``first_kept`` is the oldest offset still held: a reader behind it missed events."""

    events: list[OffsetEvent]
    next_after: int
    first_kept: int = 0


ConversationStart.model_rebuild()


# --- bounding large values (pure helpers, used inside the workflow) --------------


def message_chars(message: AnyMessage) -> int:
    """About how much room a message takes: its text plus its tool calls' arguments."""
    content = message.content
    size = len(content) if isinstance(content, str) else len(json.dumps(content, default=str))
    if isinstance(message, AIMessage):
        size += sum(len(json.dumps(c["args"], default=str)) for c in message.tool_calls)
    return size


def model_view(content: str, limit: int = MODEL_RESULT_MAX_CHARS) -> str:
    """A tool result as the model reads it: whole up to ``limit`` characters, else its
    beginning and a note that says how much was left out and where the rest is."""
    if len(content) <= limit:
        return content
    return (
        content[:limit]
        + f"\n\n[Parley: this result is {len(content):,} characters long; you see the first "
        f"{limit:,}. The whole result is kept in the conversation's history. Ask the user, "
        "or call the tool with narrower arguments, if you need the rest.]"
    )


def turn_tool_result(tool_call_id: str, name: str, result: ToolResult) -> TurnToolResult:
    """The result as a turn reports it: content cut to ``PREVIEW_CHARS``, a payload
    over ``PAYLOAD_PREVIEW_BYTES`` left out; both say so."""
    content = result.content
    preview = TurnToolResult(
        tool_call_id=tool_call_id,
        name=name,
        status=result.status,
        content=content,
        payload=result.payload,
        error=result.error,
    )
    if len(content) > PREVIEW_CHARS:
        preview.content = content[:PREVIEW_CHARS] + f" [… {len(content):,} characters in all]"
        preview.content_chars = len(content)
    if result.payload is not None:
        size = len(json.dumps(result.payload, default=str, ensure_ascii=False).encode())
        if size > PAYLOAD_PREVIEW_BYTES:
            preview.payload = None
            preview.payload_omitted_bytes = size
    if result.error is not None and result.error.body is not None:
        size = len(json.dumps(result.error.body, default=str, ensure_ascii=False).encode())
        if size > PAYLOAD_PREVIEW_BYTES:
            preview.error = result.error.model_copy(update={"body": f"[{size:,} bytes left out]"})
    return preview


# --- Temporal UI ------------------------------------------------------------------

PARLEY_USER = SearchAttributeKey.for_keyword("ParleyUser")
PARLEY_STATUS = SearchAttributeKey.for_keyword("ParleyStatus")
PARLEY_PENDING_TOOLS = SearchAttributeKey.for_keyword_list("ParleyPendingTools")
SEARCH_ATTRIBUTES = (PARLEY_USER, PARLEY_STATUS, PARLEY_PENDING_TOOLS)
