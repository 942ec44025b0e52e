"""What a conversation's run starts with (:class:`ConversationStart`) and the state it
holds and carries across continue-as-new (:class:`ConversationState`).

The carried state is split by owner, one sub-model each, so that every piece has one
place in the workflow that changes it:

- :class:`TranscriptWindow`: the latest messages and the stored chain (``Ledger``);
- :class:`AuditWindow`: the latest audit entries (``Ledger``);
- :class:`EventWindow`: the latest AG-UI events (``EventLog``);
- :class:`DelegationState`: subagents at work and their reports (``Subagents``);
- :class:`DeduplicationState`: results by update id and decisions queued by signal
  (``Deduplication``, ``SignalledDecisions``);
- ``pending``: the calls waiting for a decision (``PendingCalls``).

On the wire the state keeps the flat shape it had before the split (``transcript``,
``transcript_offset``, ``audit``, ``recent_results``…), field for field: a build from
before the split (a rollback, a run still draining) reads what this one carries, and
every recorded history still replays. :meth:`ConversationState._from_flat` reads that
shape into the sub-models, and the serializer writes it back.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from parley.contracts.audit import AuditArchiveRef, AuditEntry
from parley.contracts.busy import QueuedMessage, WhileBusy
from parley.contracts.conversation import (
    Counters,
    DecideInput,
    Delegation,
    PendingCall,
    RememberedDecision,
    ScheduledCall,
    SubagentReport,
    SubagentTask,
    ToolCall,
    TranscriptCut,
    TurnResult,
)
from parley.contracts.failover import ModelChoice
from parley.contracts.instructions import AgentInstructions
from parley.contracts.limits import (
    CONTINUE_AS_NEW_AFTER_EVENTS_DEFAULT,
    MESSAGE_MAX_BYTES_DEFAULT,
    MODEL_CALLS_PER_TURN_DEFAULT,
    PENDING_EXPIRY_SECONDS_DEFAULT,
    PENDING_EXPIRY_SECONDS_MAX,
)
from parley.contracts.model import ContextRef
from parley.contracts.names import ConversationStatus, check_user_id, workflow_id_for
from parley.contracts.payloads import Contract, Messages
from parley.contracts.tools import ToolCatalogue, TurnToolResult
from parley.contracts.usage import Usage


class TranscriptWindow(Contract):
    """The latest messages (``messages[0]`` is message number ``offset``) and the
    stored transcript as of the latest model call: messages before
    ``model_context.length`` are in the store, the rest go with the next call."""

    messages: Messages = Field(default_factory=list)
    offset: int = 0
    model_context: ContextRef | None = None

    @property
    def length(self) -> int:
        """How many messages the conversation has, kept or not."""
        return self.offset + len(self.messages)

    def drop_oldest(self, count: int) -> None:
        del self.messages[:count]
        self.offset += count


class _LatestEntries:
    """A log of which only the latest entries are kept: ``entries[0]`` is entry number
    ``offset``."""

    entries: list[Any]
    offset: int

    @property
    def total(self) -> int:
        """How many entries the log has had, kept or not."""
        return self.offset + len(self.entries)

    def keep_latest(self, count: int) -> None:
        extra = len(self.entries) - count
        if extra > 0:
            del self.entries[:extra]
            self.offset += extra


class ArchiveAuditInput(Contract):
    """``archive_audit``: store ``entries`` (entry number ``first`` first) after
    ``parent``, the archive so far (None: a new archive starts at ``first``)."""

    parent: AuditArchiveRef | None = None
    first: int
    entries: list[AuditEntry]


class AuditWindow(_LatestEntries, Contract):
    """The latest audit entries, and the archive of the older ones (``archive``).

    An entry leaves the window only once it is archived, so the audit log loses
    nothing (``parley.workflows.record.audit_archive``); past ``cap`` entries (a run of a build
    before the archive, whose history has no archive step) the oldest go regardless,
    and the archive, if any, no longer meets the window."""

    entries: list[AuditEntry] = Field(default_factory=list)
    offset: int = 0
    archive: AuditArchiveRef | None = None

    def archive_meets_window(self) -> bool:
        return self.archive is not None and self.archive.end >= self.offset

    def archived_until(self) -> int:
        """The number of the first entry not archived."""
        if self.archive is not None and self.archive_meets_window():
            return self.archive.end
        return self.offset

    def to_archive(self, keep: int) -> list[AuditEntry]:
        """The entries older than the latest ``keep`` that are not archived yet."""
        start, stop = self.archived_until(), self.total - keep
        return self.entries[start - self.offset : stop - self.offset] if stop > start else []

    def keep_latest_archived(self, keep: int, cap: int) -> None:
        """Drop the oldest entries beyond the latest ``keep`` that are archived (past
        ``cap`` entries, the oldest beyond ``keep`` whatever they are)."""
        extra = len(self.entries) - keep
        if extra > 0 and len(self.entries) <= cap:
            extra = min(extra, self.archived_until() - self.offset)
        if extra > 0:
            del self.entries[:extra]
            self.offset += extra


class EventWindow(_LatestEntries, Contract):
    """The latest AG-UI events (JSON objects); an entry's offset is its number."""

    entries: list[dict[str, Any]] = Field(default_factory=list)
    offset: int = 0


class DelegationState(Contract):
    """The subagents at work for this conversation and their reports not yet applied
    (bounded: one per call of a model message; no continue-as-new while any works), and,
    in a subagent's own conversation, how many reports it has sent its parent."""

    active: list[Delegation] = Field(default_factory=list)
    reports: list[SubagentReport] = Field(default_factory=list)
    reports_sent: int = 0
    #: The tokens of the subagents that have ended, summed.
    ended_usage: Usage | None = None

    def usage(self) -> Usage:
        """The tokens the subagents have used: those that ended, and those at work as
        they last reported."""
        total = self.ended_usage or Usage()
        for delegation in self.active:
            total = total + (delegation.usage or Usage())
        return total


class DeduplicationState(Contract):
    """What makes a client's retry safe across continue-as-new.

    ``recent_results``: the results of the latest updates by update id, so a retried
    ``send`` or ``decide`` gets the first result (bounded). ``queued_decisions``:
    decisions received by the ``decide_signal`` signal, applied in order between turns
    (bounded: past ``QUEUED_DECISIONS_KEPT`` a new one is refused and recorded)."""

    recent_results: dict[str, TurnResult] = Field(default_factory=dict)
    queued_decisions: list[DecideInput] = Field(default_factory=list)


#: Where each field of the flat shape lives in the sub-models: (sub-model, its field).
_FLAT_FIELDS: dict[str, tuple[str, str]] = {
    "transcript": ("transcript", "messages"),
    "transcript_offset": ("transcript", "offset"),
    "model_context": ("transcript", "model_context"),
    "audit": ("audit", "entries"),
    "audit_offset": ("audit", "offset"),
    "audit_archive": ("audit", "archive"),
    "events": ("events", "entries"),
    "events_offset": ("events", "offset"),
    "delegations": ("delegations", "active"),
    "subagent_reports": ("delegations", "reports"),
    "reports_sent": ("delegations", "reports_sent"),
    "subagent_usage": ("delegations", "ended_usage"),
    "recent_results": ("dedup", "recent_results"),
    "queued_decisions": ("dedup", "queued_decisions"),
}


_PARTS = ("transcript", "audit", "events", "delegations", "dedup")


class ConversationState(Contract):
    """The workflow's whole state: what continue-as-new carries and ``state()`` pages.

    Bounded whatever the conversation's length: the transcript, the audit log and the
    event log keep their latest entries (``KEPT_*``), each with the absolute offset of
    its first kept entry. Older messages are in the transcript chain (``model_context``).
    """

    session_id: str
    user_id: str
    reviewers: list[str] = Field(default_factory=list)
    status: ConversationStatus = "idle"
    ended: bool = False
    transcript: TranscriptWindow = Field(default_factory=TranscriptWindow)
    pending: list[PendingCall] = Field(default_factory=list)
    #: Approved calls in their undo window (``parley.workflows.turn.undo``).
    scheduled: list[ScheduledCall] = Field(default_factory=list)
    audit: AuditWindow = Field(default_factory=AuditWindow)
    events: EventWindow = Field(default_factory=EventWindow)
    runs: int = 0
    #: Whether a turn is in flight (never true when continue-as-new carries the state).
    turn_running: bool = False
    #: The results the turn in flight has given so far (its ``TurnResult.results``).
    turn_results: list[TurnToolResult] = Field(default_factory=list)
    counters: Counters = Field(default_factory=Counters)
    last_turn: TurnResult | None = None
    #: The worker's tools as of this conversation's latest model call (policies, schemas).
    tools: ToolCatalogue | None = None
    dedup: DeduplicationState = Field(default_factory=DeduplicationState)
    #: Decisions the user asked to remember, by call shape (bounded: the oldest go).
    remembered: list[RememberedDecision] = Field(default_factory=list)
    #: The worker build (``<deployment>:<build id>``) of the run that last moved this
    #: conversation to a newer build: a run on that same build never moves again, so a
    #: target that does not change cannot start a loop of continue-as-new.
    upgraded_from: str | None = None
    delegations: DelegationState = Field(default_factory=DelegationState)
    #: The tokens of every model call so far (``parley.workflows.turn.usage``); None: none yet.
    usage: Usage | None = None
    #: Messages that arrived while a turn ran and wait for one (``parley.workflows.turn.busy``;
    #: at most ``QUEUED_MESSAGES_MAX``), oldest first.
    queued_messages: list[QueuedMessage] = Field(default_factory=list)
    #: The spending mark now, in total tokens (``parley.workflows.turn.spending``); None: the
    #: policy file's ``[budget]`` step, if any.
    spend_mark: int | None = None
    #: Calls of the front end's own tools (``ClientTool``) that wait for its result
    #: (``parley.workflows.client_tools``): the model is not called while any waits.
    client_calls: list[ToolCall] = Field(default_factory=list)
    #: The agent's instructions as this conversation keeps them (learned at a run's
    #: first model call; ``parley.workflows.turn.instructions``); None: not learned yet.
    instructions: AgentInstructions | None = None
    #: What the message that started the conversation added to them (audited).
    added_instructions: str | None = None
    #: The model its calls use after a failover, until the cool-down (None: the first;
    #: ``parley.workflows.turn.failover``).
    model_choice: ModelChoice | None = None

    def tree_usage(self) -> Usage:
        """The tokens of this conversation's model calls and of its subagents'."""
        return (self.usage or Usage()) + self.delegations.usage()

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        """The flat shape on the wire: each field moves into its sub-model (where a
        sub-model has the field's own name, the field is a list)."""
        if not isinstance(data, dict):
            return data
        moved: dict[str, dict[str, Any]] = {}
        kept = dict(data)
        for name, (part, field) in _FLAT_FIELDS.items():
            if name in kept and (name != part or isinstance(kept[name], list)):
                moved.setdefault(part, {})[field] = kept.pop(name)
        for part, fields in moved.items():
            current = kept.get(part)
            kept[part] = {**(current if isinstance(current, dict) else {}), **fields}
        return kept

    @model_serializer(mode="wrap")
    def _without_empty_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        """Written in the flat shape, field for field as before the split: a build
        from before it (a rollback, a run still draining) reads what this one carries."""
        data = Contract._without_empty_defaults(self, handler, info)
        if not isinstance(data, dict):
            return data
        parts = {part: data.pop(part, None) for part in _PARTS}
        for name, (part, field) in _FLAT_FIELDS.items():
            sub = parts[part]
            if isinstance(sub, dict) and field in sub:
                data[name] = sub[field]
        return data


class ForkOrigin(Contract):
    """Where a forked conversation came from: the conversation and run it was cut from,
    and the first ``cut.at`` messages it starts with (``parley.workflows.lifecycle.rewind``)."""

    session_id: str
    run_id: str
    cut: TranscriptCut


class ConversationStart(Contract):
    session_id: str
    user_id: str
    pending_expiry_seconds: float = Field(
        default=PENDING_EXPIRY_SECONDS_DEFAULT, gt=0, le=PENDING_EXPIRY_SECONDS_MAX
    )
    max_model_calls_per_turn: int = Field(default=MODEL_CALLS_PER_TURN_DEFAULT, ge=1)
    #: Continue-as-new (between turns, after at least one turn in the run) once this
    #: run's history is this long.
    continue_as_new_after_events: int = Field(default=CONTINUE_AS_NEW_AFTER_EVENTS_DEFAULT, ge=1)
    #: A message longer than this (UTF-8 bytes) is refused before it enters history.
    max_message_bytes: int = Field(default=MESSAGE_MAX_BYTES_DEFAULT, ge=1, le=64 * 1024 * 1024)
    #: Users besides the owner who may read the conversation and decide on its calls
    #: (a policy rule may require one of them: ``PolicyRule.requires_reviewer``).
    reviewers: list[str] = Field(default_factory=list, max_length=32)
    #: What a message sent while a turn runs does when it does not say (``while_busy``
    #: of ``SendMessageInput``); None: ``reject``.
    while_busy: WhileBusy | None = None
    #: Set when a parent conversation starts this one as a subagent (a child workflow).
    subagent: SubagentTask | None = None
    #: Set when ``parley fork`` starts this conversation from another one's first messages.
    forked_from: ForkOrigin | None = None
    #: Set only by continue-as-new: everything the previous run held.
    carried_state: ConversationState | None = None

    @field_validator("user_id")
    @classmethod
    def _user(cls, value: str) -> str:
        return check_user_id(value)

    @field_validator("reviewers")
    @classmethod
    def _reviewers(cls, value: list[str]) -> list[str]:
        return sorted({check_user_id(user) for user in value})

    @field_validator("session_id")
    @classmethod
    def _session(cls, value: str) -> str:
        workflow_id_for(value, subagent=True)  # a user's id was checked by the client
        return value
