"""The conversation's contracts: the updates' inputs and results, the parts of its
state, and the pages its queries return. (Its start and the state continue-as-new carries
are in ``parley.contracts.state``.)"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypedDict

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from parley.contracts.audit import AuditArchiveRef, AuditEntry
from parley.contracts.busy import WhileBusy
from parley.contracts.grants import RememberedDecision
from parley.contracts.judging import JudgeVerdict
from parley.contracts.model import ClientContext, ClientTool, ClientToolResult, ContextRef
from parley.contracts.names import (
    ConversationStatus,
    DecisionAction,
    TurnStatus,
)
from parley.contracts.payloads import Contract, Messages
from parley.contracts.previews import ToolPreview
from parley.contracts.tools import TurnToolResult
from parley.contracts.usage import Usage


class SubagentTask(Contract):
    """What a subagent's conversation is for: the task its parent handed it (its one
    message), and where it reports (the parent's workflow and the call it answers)."""

    name: str
    task: str
    parent_workflow_id: str
    tool_call_id: str
    instructions: str = ""
    #: The tokens the parent's conversation (with its subagents) had used when it
    #: handed the task over, and its spending mark then: the ``[budget]`` mark holds
    #: for the whole tree, so the subagent counts from there.
    spent_before: int = 0
    spend_mark: int | None = None


class SubagentRef(Contract):
    """A subagent's conversation, as its parent knows it."""

    name: str
    session_id: str
    #: The parent's call that handed it its task; answered with the subagent's reply.
    tool_call_id: str


class Delegation(SubagentRef):
    """A subagent at work for the parent (``ConversationState.delegations``)."""

    #: The ``sequence`` of the latest report applied: older ones are ignored.
    reports_seen: int = 0
    #: The subagent's usage as it last reported it (its model calls, its own subagents').
    usage: Usage | None = None


class StrictInput(Contract):
    """An input a client sends (an update's, a query's): a key it does not define is
    refused, never ignored (``"mesage"`` would lose a reason, ``"args"`` on an approve
    would look like an edit that never happens)."""

    model_config = ConfigDict(extra="forbid")


class ClientRun(TypedDict, total=False):
    """What a client (AG-UI) gives the run its request starts: the fields of the same
    names on ``SendMessageInput`` and ``DecideInput``."""

    run_id: str | None
    context: list[ClientContext]
    client_tools: list[ClientTool]
    tool_results: list[ClientToolResult]
    link: str


class SendMessageInput(StrictInput):
    text: str
    message_id: str
    user_id: str
    #: What to do if a turn is running when the message arrives (``parley.contracts.busy``);
    #: None: the conversation's default (``ConversationStart.while_busy``).
    while_busy: WhileBusy | None = None
    #: The id of the run this message starts, as its client named it (AG-UI ``runId``):
    #: the event log's ``RUN_STARTED``/``RUN_FINISHED`` carry it. None: ``run-<n>``.
    run_id: str | None = None
    #: Context for the model during this message's turn (``ClientContext``).
    context: list[ClientContext] = Field(default_factory=list)
    #: The front end's own tools for this turn (``ClientTool``).
    client_tools: list[ClientTool] = Field(default_factory=list)
    #: The front end's answers to calls of its tools that wait for one
    #: (``ConversationState.client_calls``); with them, ``text`` may be empty.
    tool_results: list[ClientToolResult] = Field(default_factory=list)
    #: Added to the worker's instructions for the whole conversation; only the message
    #: that starts it may carry them, and only where the worker allows it
    #: (``PARLEY_ALLOW_ADDED_INSTRUCTIONS``; ``parley.contracts.instructions``).
    added_instructions: str | None = Field(default=None, max_length=64 * 1024)


class Decision(StrictInput):
    tool_call_id: str
    action: DecisionAction
    args: dict[str, Any] | None = None
    message: str | None = None
    #: The digest of the arguments the decider saw (``PendingCall.args_hash``): when
    #: given, the decision is refused if the call's arguments are no longer those.
    args_hash: str | None = None
    #: The hash of the preview the decider saw: refused if the call's is no longer it.
    preview_hash: str | None = None
    #: Apply this decision to later calls of the same shape (the same tool with the
    #: same arguments) for the rest of the conversation: an approve makes them run
    #: at once, a reject refuses them. Recorded in the audit log each time.
    remember: bool = False
    #: How long a remembered decision lasts, in seconds (with ``remember`` only); None:
    #: the policy file's ``[grants] remember_seconds``, else the rest of the conversation.
    #: Never longer than the file's ``max_remember_seconds``.
    remember_seconds: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _complete(self) -> Decision:
        if self.remember_seconds is not None and not self.remember:
            raise ValueError(
                f"remember_seconds of {self.tool_call_id} goes with remember; set remember "
                "to keep this decision for later calls"
            )
        if self.action == "edit" and self.args is None:
            raise ValueError(f"edit of {self.tool_call_id} needs new args")
        if self.action != "edit" and self.args is not None:
            raise ValueError(
                f"{self.action} of {self.tool_call_id} takes no args; to change the "
                "arguments, send action 'edit'"
            )
        if self.action in ("approve", "edit") and (self.message or "").strip():
            raise ValueError(
                f"{self.action} of {self.tool_call_id} takes no message; a message goes "
                "with 'reject' (a reason) or 'respond' (the answer the model reads)"
            )
        if self.action == "respond" and not (self.message or "").strip():
            raise ValueError(f"respond to {self.tool_call_id} needs a message")
        return self


class DecideInput(StrictInput):
    decisions: list[Decision]
    decided_by: str
    #: Set by a client that sent this ``decide`` as ``decide_signal`` because no worker
    #: was there: the ``decide`` update of this id, sent again later, gets its result.
    request_id: str | None = None
    #: Set when the decision comes by a signed approval link (``parley.contracts.links``): the
    #: link's id. Such a decision names one call; the others keep waiting.
    link: str | None = None
    #: As on ``SendMessageInput``: the run these decisions resume, its context and tools.
    run_id: str | None = None
    context: list[ClientContext] = Field(default_factory=list)
    client_tools: list[ClientTool] = Field(default_factory=list)
    #: The decider's groups, as the gateway verified them from an OpenID Connect token:
    #: a reviewer ``group:<name>`` of the conversation counts them in (``gate``). Like
    #: ``decided_by``, the workflow takes the client's word. Empty (left out): none.
    groups: list[str] = Field(default_factory=list, max_length=64)


class EndInput(StrictInput):
    user_id: str


class TranscriptCut(Contract):
    """The first ``at`` messages of a conversation, as a fork starts with them and a
    rewind keeps them: ``context`` is one stored segment of exactly those messages
    (written by the owner's client from the conversation's own chain,
    ``parley.client.forks``), ``tail`` its last messages (bounded like the kept window),
    which the state's pages show without reading the store."""

    at: int = Field(ge=1)
    context: ContextRef
    tail: Messages = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TranscriptCut:
        if self.context.length != self.at or len(self.tail) > self.at:
            raise ValueError(f"the stored cut must hold exactly {self.at} messages")
        return self


class RewindInput(StrictInput):
    """``rewind``: keep the first ``cut.at`` messages and go on from there in a new run.
    ``seen_length`` and ``seen_context`` are what the client read the cut from: a
    conversation that moved on since (a turn ran) refuses it."""

    user_id: str
    cut: TranscriptCut
    seen_length: int
    seen_context: ContextRef | None = None


class ToolCall(Contract):
    """A tool call as the workflow handles it, from the model's proposal to its answer."""

    tool_call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, proposed: Any) -> ToolCall:
        """From LangChain's tool-call dict (``AIMessage.tool_calls``)."""
        return cls(tool_call_id=proposed["id"] or "", name=proposed["name"], args=proposed["args"])


class OnTimeout(Contract):
    """A rule's answer to a call nobody decided on in time (``PolicyRule.on_timeout``)."""

    action: Literal["expire", "reject", "escalate"]
    #: How long each wait lasts (seconds).
    seconds: float
    #: ``reject``: what the model reads.
    reason: str | None = None
    #: ``escalate``: who is told; ``escalated`` once told and the wait extended.
    escalate_to: str | None = None
    escalated: bool = False


class Approval(Contract):
    """One reviewer's approval of a call that needs several (a rule's ``approvals``)."""

    by: str
    at: datetime


class PendingCall(ToolCall):
    """A ``confirm`` call waiting for a decision. ``args`` are canonical (the tool's
    canonical form, the one the rules matched and the one that will run)."""

    description: str
    #: The digest of ``args`` (``args_hash``), in the audit log and on every surface.
    args_hash: str = ""
    #: Who changed the arguments, when a decision edited them and the edit waits for
    #: another decision (a rule that requires a reviewer).
    edited_by: str | None = None
    expires_at: datetime
    #: Why it waits: "confirm because rule `push-protected` matched", or the tool's
    #: own policy (None).
    reason: str | None = None
    #: The policy rule whose match made it wait (``PolicyOutcome.rule``); None: the
    #: tool's own policy, the spending mark, or a call recorded before this field.
    rule: str | None = None
    #: What its rule says happens at ``expires_at``; None: it expires.
    on_timeout: OnTimeout | None = None
    #: The rule that requires a reviewer other than the requester to approve it.
    reviewer_rule: str | None = None
    #: Set on a parent's pending list for a call its subagent made: the decision is
    #: passed on to that subagent's conversation, which runs (or expires) the call.
    subagent: SubagentRef | None = None
    #: A quorum (a rule's ``approvals`` > 1): how many distinct reviewers, never the
    #: requester, must approve these very arguments before the call runs, and who has.
    #: An edit is a new proposal (its count starts again); a rejection answers the call.
    approvals_needed: int = 1
    approvals: list[Approval] = Field(default_factory=list)
    #: When it was proposed: the instant the rules were evaluated at (the worker
    #: evaluates its own again with it before it runs a quorum call).
    proposed_at: datetime | None = None
    #: What the call would change, as its tool's preview computed it when the call
    #: became pending (``preview_call``); None for a tool without one. An approval is
    #: of these arguments and this preview: one that changed refuses it.
    preview: ToolPreview | None = None
    #: Its rule's undo window: once approved, the call waits this long before it runs,
    #: and the approver or the owner may undo it meanwhile (``parley.contracts.undo``).
    undo_seconds: int | None = None
    #: Its rule's judge's verdict (``parley.contracts.judging``), shown on every surface.
    judged: JudgeVerdict | None = None

    def interrupt_metadata(self) -> dict[str, Any]:
        """What an AG-UI interrupt carries of the call: its name and arguments, and a
        quorum's count (``approvals_needed``, who approved)."""
        metadata: dict[str, Any] = {"name": self.name, "args": self.args}
        if self.args_hash:  # a resume may pin it (``Decision.args_hash``)
            metadata["args_hash"] = self.args_hash
        if self.approvals_needed > 1:
            metadata["approvals_needed"] = self.approvals_needed
            metadata["approved_by"] = [approval.by for approval in self.approvals]
        if self.preview is not None:  # a resume may pin it (``Decision.preview_hash``)
            metadata["preview"] = self.preview.model_dump(mode="json", exclude_none=True)
        if self.judged is not None:
            metadata["judged"] = self.judged.model_dump(mode="json", exclude_none=True)
        return metadata

    def waiting_message(self) -> str:
        """An AG-UI interrupt's ``message``: what waits, and what it would change."""
        message = f"{self.name} waits for your decision: {self.description}"
        if self.preview is not None:
            message += f" Preview: {self.preview.summary()}"
        if self.judged is not None:
            message += f" ({self.judged.label()})"
        return message


class ScheduledCall(Contract):
    """An approved call in its undo window: it runs at ``runs_at`` unless undone first."""

    tool_call_id: str
    name: str
    runs_at: datetime
    approved_by: str
    #: A quorum's earlier approvers: each of them may undo it too.
    approvers: list[str] = Field(default_factory=list)
    #: Who undid it (an approver or the owner), once someone did.
    undone_by: str | None = None
    #: In a parent's list: the call waits in this subagent's conversation, which runs
    #: it (told by ``subagent_window``); an undo of it is passed on there.
    subagent: SubagentRef | None = None


class SubagentReport(Contract):
    """The ``subagent_report`` signal: a subagent's conversation came to rest with calls
    that wait for a decision (its end comes as the child workflow's result)."""

    tool_call_id: str
    #: Counts the subagent's reports, so its parent applies each one once, in order.
    sequence: int
    pending: list[PendingCall] = Field(default_factory=list)
    results: list[TurnToolResult] = Field(default_factory=list)
    #: The tokens the subagent's conversation has used so far (its own subagents' too).
    usage: Usage | None = None
    #: Set when the subagent refused the decisions its parent passed on (why, in one
    #: line): the parent records them refused, never decided.
    refused: str | None = None


class TurnResult(Contract):
    """Where a turn came to rest. (The caller knows which conversation it addressed.)"""

    status: TurnStatus
    reply: str | None = None
    pending: list[PendingCall] = Field(default_factory=list)
    results: list[TurnToolResult] = Field(default_factory=list)
    error: str | None = None
    #: The tokens of this turn's model calls (None: it called no model).
    usage: Usage | None = None
    #: The turn's model changed (a failover, or back after its cool-down): from, to, why.
    notice: str | None = None

    def left_waiting(self, call: PendingCall) -> bool:
        """Whether the decision on ``call`` that led here left it waiting just as it
        was (same arguments, no approval more): nothing of it was applied, as when a
        subagent refused it. A surface says "decided" only when this is False."""
        now = next((p for p in self.pending if p.tool_call_id == call.tool_call_id), None)
        return (
            now is not None
            and now.args_hash == call.args_hash
            and len(now.approvals) == len(call.approvals)
        )


class Counters(Contract):
    turns: int = 0
    model_calls: int = 0
    tool_runs: int = 0
    decisions: int = 0
    continued_as_new: int = 0
    subagents: int = 0
    rewinds: int = 0


class NotifyInput(Contract):
    """``notify``: tell the worker's webhook that calls wait for a decision."""

    session_id: str
    user_id: str
    pending: list[PendingCall]
    #: Which turn left them pending (``run-N``): with the session, the webhook's
    #: idempotency key.
    run_id: str
    #: Set when no one decided in time and a rule escalates: the user now asked.
    escalated_to: str | None = None
    #: The conversation's reviewers: they get approval links too (``parley.contracts.links``).
    reviewers: list[str] = Field(default_factory=list)
    #: Per call id, who may approve it (``workflows.awaiting``): only they get an
    #: approve link. A call not named here (a notification of an older run): everyone.
    approvers: dict[str, list[str]] = Field(default_factory=dict)


class Awaiting(Contract):
    """Who a pending call waits for, as the reader of a snapshot sees it: computed from
    the gate's own checks (``workflows.awaiting``), so a surface offers a button, a
    link or a hint only to someone whose decision would be taken."""

    tool_call_id: str
    #: Who may approve it now (never the requester of a reviewer rule's call, never a
    #: reviewer who already approved these arguments for a quorum).
    approvers: list[str] = Field(default_factory=list)
    #: How many more approvals it needs before it runs.
    approvals_left: int = 1
    #: "waiting for 1 more reviewer: bob or carol".
    text: str = ""
    #: Whether the reader's approve (or edit) would be taken.
    may_approve: bool = False
    #: Whether the reader may answer it otherwise (reject, respond).
    may_decide: bool = False


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
    #: Where entries before the ones this process keeps can be read (``parley.client.audit``).
    audit_archive: AuditArchiveRef | None = None
    counters: Counters
    event_count: int
    last_turn: TurnResult | None = None
    #: The tokens of every model call of the conversation and of its subagents, summed.
    usage: Usage = Field(default_factory=Usage)
    #: The part of ``usage`` that its subagents' conversations used.
    subagent_usage: Usage = Field(default_factory=Usage)
    #: For each pending call, who it waits for and what the reader may do about it.
    awaiting: list[Awaiting] = Field(default_factory=list)
    #: Approved calls that wait out their undo window (run at ``runs_at``, unless undone).
    scheduled: list[ScheduledCall] = Field(default_factory=list)
    #: The calls (ids) the ``revert`` update would take once nothing runs or waits: each
    #: ran and succeeded here (not in a fork's origin), its tool declares an inverse,
    #: and it was not reverted yet. Every surface offers Revert on these, and only these.
    revertible: list[str] = Field(default_factory=list)
    #: The remembered decisions (grants) in force, oldest first (``parley grants``).
    remembered: list[RememberedDecision] = Field(default_factory=list)
