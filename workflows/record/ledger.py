"""The ledger: the one place a tool call gets its answer, and the state stays bounded.
Workflow side (deterministic; the audit clock is ``workflow.now()``).

Every tool call the model proposes gets exactly one answer: a ``ToolMessage`` in the
transcript (what the model reads), a ``TOOL_CALL_RESULT`` event (the whole envelope,
previews for big content), an audit entry, and a result in the turn's ``TurnResult``.
:meth:`Ledger.answer` writes all four, whatever path the call took (ran, refused,
decided, expired, not run). A person's message enters the conversation here too
(:meth:`Ledger.enter`: the transcript, and the audit entry ``message``), once, whatever
brought it (a message, one that waited for a turn, a subagent's task).

The ledger is the one writer of the audit log (``ConversationState.audit``, archived by
``audit_archive`` through :meth:`Ledger.archived`) and of the turn's results so far
(``turn_results``, ``last_turn``); the transcript's writer is ``transcript``, the event
log's ``events``, the pending list's ``pending``. :meth:`Ledger.trim` keeps the state
bounded and :meth:`Ledger.snapshot` reads it a page at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from langchain_core.messages import AIMessage, ToolMessage
from temporalio import workflow

from parley.contracts import (
    KEPT_AUDIT_ENTRIES,
    PAGE_CHARS,
    PAYLOAD_CONTEXT,
    AuditArchiveRef,
    AuditEntry,
    ConversationSnapshot,
    ConversationState,
    Counters,
    PendingCall,
    PolicyOutcome,
    StateQuery,
    StoredResult,
    ToolCall,
    ToolErrorInfo,
    ToolResult,
    TurnResult,
    TurnStatus,
    TurnToolResult,
    message_chars,
    model_view,
    turn_tool_result,
)
from parley.contracts.errors import ErrorType, model_visible_text
from parley.contracts.judging import JudgeVerdict
from parley.workflows.record.audit_archive import AUDIT_WINDOW_CAP
from parley.workflows.record.events import EventLog
from parley.workflows.record.pending import PendingCalls
from parley.workflows.record.transcript import Transcript

AuditEvent = Literal["ran", "failed", "refused", "decided", "expired"]


def error_result(
    error_type: str, message: str, *, http_status: int | None = None, body: Any = None
) -> ToolResult:
    """An error envelope; the model reads it as design.md's error table says."""
    return ToolResult(
        status="error",
        content=model_visible_text(error_type, message),
        error=ToolErrorInfo(type=error_type, message=message, http_status=http_status, body=body),
    )


class Ledger:
    def __init__(
        self,
        state: ConversationState,
        transcript: Transcript,
        events: EventLog,
        pending: PendingCalls,
    ) -> None:
        self._state = state  # read, but for the audit log and the turn's results
        self._transcript, self._events, self._pending = transcript, events, pending

    def enter(self, text: str, message_id: str, by: str, detail: dict[str, Any]) -> None:
        """A person's message enters the conversation: the model reads it, the audit log
        says who sent it (``detail``: how it came)."""
        self._transcript.add_human(text, message_id)
        self.audit("message", by, detail=detail)

    def audit(
        self,
        event: str,
        actor: str,
        tool_call_id: str | None = None,
        name: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Append an entry, chained to the one before it (``AuditEntry.chained_hash``):
        the history that carries the state is the chain's anchor. A ``decided`` entry
        records how its decision arrived (``channel``)."""
        detail = detail or {}
        entry = AuditEntry(
            at=workflow.now(),
            event=event,  # type: ignore[arg-type]
            actor=actor,
            tool_call_id=tool_call_id,
            name=name,
            detail=detail,
            channel=_decision_channel(detail) if event == "decided" else None,
        )
        entry.prev_hash = self._audit_head()
        entry.hash = entry.chained_hash(entry.prev_hash)
        self._state.audit.entries.append(entry)

    def _audit_head(self) -> str:
        """The hash of the latest entry. Entries carried from a build before the chain
        have none: they are chained now, in order, from the latest one that has (or from
        the conversation's genesis)."""
        entries = self._state.audit.entries
        start = len(entries)
        while start > 0 and entries[start - 1].hash is None:
            start -= 1
        head = entries[start - 1].hash if start else AuditEntry.genesis(self._state.session_id)
        assert head is not None
        for entry in entries[start:]:
            entry.prev_hash = head
            entry.hash = head = entry.chained_hash(head)
        return head

    def audit_policy(self, call: ToolCall, outcome: PolicyOutcome | None) -> None:
        """Record which rule (or remembered decision) decided a call's policy."""
        if outcome is not None and (outcome.rule is not None or outcome.remembered):
            detail = outcome.model_dump(exclude_defaults=True)
            self.audit("policy", "parley", call.tool_call_id, call.name, detail)

    def answer(
        self,
        call: ToolCall,
        result: ToolResult,
        audit_event: AuditEvent,
        detail: dict[str, Any] | None = None,
        actor: str | None = None,
        stored: StoredResult | None = None,
        judged: JudgeVerdict | None = None,
    ) -> None:
        """Give a tool call its one ToolMessage, event, audit entry and turn result. The
        ToolMessage holds what the model reads (a long result cut, with a note); the
        event, the artifact and the turn result hold previews. The whole result stays
        in history as ``run_tool``'s result and, when ``stored`` (the worker kept it in
        the payload store), the artifact says where (``parley result`` reads it)."""
        reported = turn_tool_result(call.tool_call_id, call.name, result)
        reported.judged = judged  # the call's judge decided it: every surface says so
        # The event's envelope has its four keys (a note when a preview was cut, the
        # judge's verdict when one decided the call); the artifact (history) what is set.
        unset_notes = {
            k
            for k in ("content_chars", "payload_omitted_bytes", "judged")
            if not getattr(reported, k)
        }
        envelope = reported.model_dump(mode="json", exclude={"tool_call_id", "name", *unset_notes})
        artifact = reported.model_dump(
            mode="json", exclude={"tool_call_id", "name", "content"}, context=PAYLOAD_CONTEXT
        )
        if stored is not None:
            artifact["stored"] = stored.model_dump(mode="json")
        message = ToolMessage(
            content=model_view(result.content),
            tool_call_id=call.tool_call_id,
            name=call.name,
            status="success" if result.status == "success" else "error",
            artifact=artifact,  # the content is the text; the artifact keeps the rest once
            id=f"result-{call.tool_call_id}",
        )
        self._transcript.add_result(message)
        self._events.tool_result(message.id or "", call.tool_call_id, envelope)
        self.audit(
            audit_event,
            actor or ("worker" if audit_event in ("ran", "failed") else "parley"),
            call.tool_call_id,
            call.name,
            {"status": result.status, **(detail or {})},
        )
        self._state.turn_results.append(reported)

    def answer_unrun(self, call: ToolCall, why: str) -> None:
        """Answer a pending call that will never run: ``expired``, and the model is told."""
        result = ToolResult(
            status="expired",
            content=(
                f"Error: {why}; this call to {call.name} expired and did not run. "
                "Do not retry it unless the user asks."
            ),
        )
        self.answer(call, result, "expired")

    def answer_timed_out(self, call: PendingCall, default_seconds: float) -> None:
        """A call nobody decided on in time: expired, or rejected if its rule says so."""
        rule = call.on_timeout
        seconds = default_seconds if rule is None else rule.seconds
        waited = seconds * (2 if rule is not None and rule.escalated else 1)
        if rule is not None and rule.action == "reject":
            reason = rule.reason or "nobody decided on it in time"
            content = (
                f"Rejected: {reason} (no decision within {_duration(waited)}); this call to "
                f"{call.name} did not run."
            )
            payload = {"decision": "reject", "message": reason, "by": "timeout"}
            result = ToolResult(status="rejected", content=content, payload=payload)
            self.answer(call, result, "expired", detail={"on_timeout": "reject"})
            return
        self.answer_unrun(call, f"nobody decided on it within {_duration(waited)}")

    def abandon_unanswered(self, ai: AIMessage) -> None:
        """After a fail-closed error, answer the calls of ``ai`` that will not run now,
        so the transcript stays valid for the next provider call."""
        answered = self._transcript.answered()
        self._pending.abandon()
        for proposed in ai.tool_calls:
            if proposed["id"] not in answered:
                result = ToolResult(
                    status="error",
                    content="Error: not run: the turn stopped after another call failed.",
                    error=ToolErrorInfo(type=ErrorType.NOT_RUN, message="the turn stopped"),
                )
                self.answer(ToolCall.of(proposed), result, "failed")

    def turn_result(
        self, status: TurnStatus, *, reply: str | None = None, error: str | None = None
    ) -> TurnResult:
        return TurnResult(
            status=status,
            reply=reply,
            pending=list(self._state.pending),
            results=list(self._state.turn_results),
            error=error,
        )

    # --- the turn in flight's results --------------------------------------------------

    def begin_turn(self) -> None:
        self._state.turn_results = []

    def add_results(self, results: list[TurnToolResult]) -> None:
        """Results given elsewhere (a subagent's), reported with this turn's."""
        self._state.turn_results += results

    def rest(self, result: TurnResult) -> None:
        """The turn rests with ``result``: what a subagent's parent reads, and snapshots."""
        self._state.last_turn = result

    def forget_turn(self) -> None:
        """A rewind cut the messages the latest turn's results belonged to."""
        self._state.turn_results = []
        self._state.last_turn = None

    # --- a bounded state, read a page at a time ----------------------------------------

    def archived(self, archive: AuditArchiveRef) -> None:
        """The audit archive now ends at ``archive.end``: the entries it holds may go."""
        self._state.audit.archive = archive
        self._state.audit.keep_latest_archived(KEPT_AUDIT_ENTRIES, AUDIT_WINDOW_CAP)

    def trim(self) -> None:
        """Keep the state bounded: drop the oldest messages (only those already in the
        stored transcript, never the latest model message), audit entries and events."""
        self._transcript.trim()
        self._state.audit.keep_latest_archived(KEPT_AUDIT_ENTRIES, AUDIT_WINDOW_CAP)
        self._events.trim()

    def snapshot(self, query: StateQuery) -> ConversationSnapshot:
        s = self._state
        transcript, transcript_offset = page(
            s.transcript.messages,
            s.transcript.offset,
            query.transcript_offset,
            query.transcript_limit,
            message_chars,
        )
        audit, audit_offset = page(
            s.audit.entries,
            s.audit.offset,
            query.audit_offset,
            query.audit_limit,
            lambda entry: len(json.dumps(entry.detail, default=str)),
        )
        return ConversationSnapshot(
            session_id=s.session_id,
            user_id=s.user_id,
            status=s.status,
            pending=s.pending,
            transcript=transcript,
            transcript_offset=transcript_offset,
            transcript_total=s.transcript.length,
            model_context=s.transcript.model_context,
            audit=audit,
            audit_offset=audit_offset,
            audit_total=s.audit.total,
            audit_archive=s.audit.archive,
            counters=s.counters,
            event_count=s.events.total,
            last_turn=s.last_turn,
            usage=s.tree_usage(),
            subagent_usage=s.delegations.usage(),
            scheduled=[c for c in s.scheduled if c.undone_by is None],
            remembered=s.remembered,
        )

    def escalated_snapshot(self, tool_call_ids: set[str]) -> ConversationSnapshot:
        """What the person some calls were escalated to may read: those calls while they
        wait, and their audit entries (who decided them, and how); no message, no other
        call, no usage."""
        s = self._state
        audit = [e for e in s.audit.entries if e.tool_call_id in tool_call_ids]
        return ConversationSnapshot(
            session_id=s.session_id,
            user_id=s.user_id,
            status=s.status,
            pending=[c for c in s.pending if c.tool_call_id in tool_call_ids],
            transcript=[],
            audit=audit,
            audit_total=len(audit),
            counters=Counters(),
            event_count=0,
        )


T = TypeVar("T")


def page(
    kept: list[T], kept_offset: int, offset: int | None, limit: int, size: Callable[[T], int]
) -> tuple[list[T], int]:
    """A page of ``kept`` (whose first item has absolute offset ``kept_offset``):
    from ``offset``, or ending with the newest item when it is None; at most ``limit``
    items and about ``PAGE_CHARS`` characters (never less than one item)."""
    if limit == 0 or not kept:
        return [], kept_offset + len(kept)
    if offset is None:
        end = len(kept)
        start = end
        budget = PAGE_CHARS
        while start > 0 and end - start < limit:
            cost = size(kept[start - 1])
            if start < end and cost > budget:
                break
            budget -= cost
            start -= 1
        return kept[start:end], kept_offset + start
    start = min(max(offset - kept_offset, 0), len(kept))
    end = start
    budget = PAGE_CHARS
    while end < len(kept) and end - start < limit:
        cost = size(kept[end])
        if end > start and cost > budget:
            break
        budget -= cost
        end += 1
    return kept[start:end], kept_offset + start


def _decision_channel(detail: dict[str, Any]) -> str:
    """How a decision reached the conversation, as the workflow can tell: Parley applying
    a remembered one, a client's ``decide`` update (the CLI, chat, the gateway's REST
    route and page, AG-UI: the update does not say which), or ``decide_signal`` (a
    decision kept while no worker was there, or a parent's passed on to its subagent)."""
    if "remembered_from" in detail:
        return "remembered"
    if "link" in detail:  # a signed approval link (parley.contracts.links), through the gateway
        return "link"
    if "judge" in detail:  # a rule's judge (parley.contracts.judging), by Parley
        return "judge"
    return "update" if workflow.current_update_info() is not None else "signal"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
