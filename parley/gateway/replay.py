"""A retried request's events: the run that answered it the first time, read again
from the conversation's event log. Client side (the gateway).

A message sent again with its id, or the same decisions sent again, runs nothing twice:
Temporal answers with the first request's result, and the log has no new event. A
stream that saw no ``RUN_STARTED`` of its own (``streams.turn_events``) replays that
run instead: the newest complete run in the log that ends as the result says (the same
pending calls, or the same tool results and reply, or the same error). Call ids are
unique in a conversation, so the match is exact whenever calls are involved. If the
log no longer holds it (trimmed), ``RUN_STARTED`` and ``RUN_FINISHED`` (or
``RUN_ERROR``) are made from the result, which ``RUN_FINISHED`` carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ag_ui.core import (
    Interrupt,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)

from parley.client import Conversations
from parley.contracts import OffsetEvent, PendingCall, TurnResult
from parley.contracts.errors import ErrorType

#: Events read per ``events`` query while looking for the run.
PAGE = 1_000
#: How many events back the search goes (the log keeps fewer).
MOST_EVENTS = 20_000


async def run_events(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    result: TurnResult,
    groups: Sequence[str] = (),
) -> list[tuple[int | None, dict[str, Any]]]:
    """The events of the run whose result is ``result``, with their offsets, read as
    ``user_id`` with their verified ``groups``."""
    log = await _kept_events(conversations, session_id, user_id, groups)
    for run in reversed(_runs(log)):
        if _answers(run, result):
            return [(item.offset, item.event) for item in run]
    return [(None, event) for event in made_from(session_id, result)]


async def _kept_events(
    conversations: Conversations, session_id: str, user_id: str, groups: Sequence[str]
) -> list[OffsetEvent]:
    events: list[OffsetEvent] = []
    after = -1
    while len(events) < MOST_EVENTS:
        page = await conversations.events(
            session_id, user_id, after=after, limit=PAGE, groups=groups
        )
        events.extend(page.events)
        if not page.events or page.next_after >= page.latest:
            break
        after = page.next_after
    return events


def _runs(log: list[OffsetEvent]) -> list[list[OffsetEvent]]:
    """Complete runs: from a ``RUN_STARTED`` to its ``RUN_FINISHED`` or ``RUN_ERROR``."""
    runs: list[list[OffsetEvent]] = []
    current: list[OffsetEvent] | None = None
    for item in log:
        kind = item.event.get("type")
        if kind == "RUN_STARTED":
            current = [item]
        elif current is not None:
            current.append(item)
            if kind in ("RUN_FINISHED", "RUN_ERROR"):
                runs.append(current)
                current = None
    return runs


def _answers(run: list[OffsetEvent], result: TurnResult) -> bool:
    last = run[-1].event
    if result.status == "failed":
        return last.get("type") == "RUN_ERROR" and last.get("message") == result.error
    if last.get("type") != "RUN_FINISHED":
        return False
    outcome = last.get("outcome") or {}
    interrupts = {i.get("id") for i in outcome.get("interrupts", [])}
    if result.status == "awaiting_approval":
        return interrupts == {call.tool_call_id for call in result.pending}
    if interrupts:
        return False
    results = {e.event.get("toolCallId") for e in run if e.event.get("type") == "TOOL_CALL_RESULT"}
    texts = [e.event.get("delta") for e in run if e.event.get("type") == "TEXT_MESSAGE_CONTENT"]
    return results == {r.tool_call_id for r in result.results} and (
        not result.reply or result.reply in texts
    )


def made_from(session_id: str, result: TurnResult) -> list[dict[str, Any]]:
    """``RUN_STARTED`` and how the run ended, from its result alone."""
    run_id = "replayed"
    started = RunStartedEvent(thread_id=session_id, run_id=run_id)
    if result.status == "failed":
        ended: RunErrorEvent | RunFinishedEvent = RunErrorEvent(
            message=result.error or "the turn failed", code=ErrorType.TURN_FAILED
        )
    else:
        outcome: RunFinishedInterruptOutcome | RunFinishedSuccessOutcome
        if result.pending:
            outcome = RunFinishedInterruptOutcome(
                interrupts=[interrupt_of(call) for call in result.pending]
            )
        else:
            outcome = RunFinishedSuccessOutcome()
        ended = RunFinishedEvent(
            thread_id=session_id,
            run_id=run_id,
            outcome=outcome,
            result=result.model_dump(mode="json"),
        )
    return [
        event.model_dump(mode="json", by_alias=True, exclude_none=True)
        for event in (started, ended)
    ]


def interrupt_of(call: PendingCall) -> Interrupt:
    """A pending call's interrupt, as the workflow's ``RUN_FINISHED`` gives it but for its
    ``responseSchema`` (which needs the tool catalogue)."""
    return Interrupt(
        id=call.tool_call_id,
        reason="tool_call",
        message=call.waiting_message(),
        tool_call_id=call.tool_call_id,
        expires_at=call.expires_at.isoformat(),
        metadata=call.interrupt_metadata(),
    )
