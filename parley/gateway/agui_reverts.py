"""Reverts and undos over AG-UI (``POST /agui``). Client side (the gateway).

A result says whether its call may be reverted: every ``TOOL_CALL_RESULT`` of an
``/agui`` run, and each tool message of a reconnect's ``MESSAGES_SNAPSHOT``
(``reconnect``), carries ``metadata: {"parley": {"revertible": true|false}}``: true for
the conversation's ``revertible`` calls, what its ``revert`` validator would take (it
ran and succeeded here, not in a fork's origin, its tool declares an inverse, and it
was not reverted yet); whether the run changed anything only the worker knows, and a
revert says so.

A client asks with the run's ``forwardedProps``, AG-UI's application-specific
passthrough, under the key ``parley`` (any other key is the client's own and ignored):

- ``{"parley": {"revert": "<call id>"}}``: the revert's turn, as ``POST
  …/calls/{id}/revert`` runs it. Parley proposes the inverse (call id
  ``revert-<id>``), which the gate sorts like any call: it mostly ends the run as an
  interrupt, answered by a resume like any other. The run's messages are not sent.
- ``{"parley": {"undo": "<call id>" | ["<call id>", …] | []}}``: takes back approved
  calls in their undo window (``[]``: every one the caller may undo). Nothing runs: the
  stream is ``RUN_STARTED`` and ``RUN_FINISHED`` whose ``result`` is ``{"undone":
  [...]}``, outside the event log; the decision's own run ends with the call undone.

Either is refused before any stream: 422 for a malformed request (one line saying
what to send) or for a call that cannot be reverted or is not in a window, 409 while
calls wait for a decision or a turn runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)
from fastapi.responses import StreamingResponse

from parley.client import ConversationRefused
from parley.contracts import StateQuery
from parley.contracts.errors import ErrorType
from parley.contracts.undo import MAX_UNDO_CALLS
from parley.gateway.deps import Gateway
from parley.gateway.errors import ApiError, refused
from parley.gateway.streams import StreamItems, sse

#: The key of ``forwardedProps`` (and of a result's ``metadata``) that is Parley's.
PARLEY_KEY = "parley"
#: What a ``forwardedProps.parley`` object may hold, as a refusal says it.
FORWARDED_SHAPE = (
    'forwardedProps.parley is {"revert": CALL_ID} (propose the inverse of a call that '
    'ran) or {"undo": CALL_ID or [CALL_ID, ...]} (take back calls in their undo window; '
    "[]: all of yours)"
)
#: The longest call id a request may name (as the REST routes take it).
MAX_CALL_ID = 128


@dataclass(frozen=True)
class CallRequest:
    """A run that asks to revert one call, or to undo calls in their window."""

    revert: str | None = None
    undo: tuple[str, ...] | None = None


def call_request(run: RunAgentInput) -> CallRequest | None:
    """The run's ``forwardedProps.parley`` request, or None when it has none. A
    malformed one is refused (422) in one line that says what to send."""
    props = run.forwarded_props
    if not isinstance(props, dict) or PARLEY_KEY not in props:
        return None
    ours = props[PARLEY_KEY]
    if not isinstance(ours, dict) or len(ours) != 1 or not set(ours) <= {"revert", "undo"}:
        raise _malformed(f"{FORWARDED_SHAPE}; got {_keys(ours)}")
    if run.resume:
        raise _malformed(
            "a run either answers its interrupts (resume) or asks for a revert or an undo "
            "(forwardedProps.parley), not both"
        )
    if "revert" in ours:
        return CallRequest(revert=_call_id(ours["revert"], "revert"))
    undo = ours["undo"]
    ids = undo if isinstance(undo, list) else [undo]
    if len(ids) > MAX_UNDO_CALLS:
        raise _malformed(
            f"forwardedProps.parley.undo names {len(ids)} calls; one undo takes at most "
            f"{MAX_UNDO_CALLS} ([]: all of yours)"
        )
    return CallRequest(undo=tuple(_call_id(call_id, "undo") for call_id in ids))


def _call_id(value: Any, key: str) -> str:
    if isinstance(value, str) and 0 < len(value) <= MAX_CALL_ID:
        return value
    raise _malformed(
        f"forwardedProps.parley.{key} must name a call by its id (a string of 1 to "
        f"{MAX_CALL_ID} characters); {FORWARDED_SHAPE}"
    )


def _keys(value: Any) -> str:
    if isinstance(value, dict):
        return "the keys " + ", ".join(sorted(map(str, value))) if value else "no key"
    return f"a JSON {type(value).__name__}"


def _malformed(message: str) -> ApiError:
    return ApiError(422, ErrorType.INVALID_REQUEST, message)


async def undo_run(
    gw: Gateway,
    session_id: str,
    user_id: str,
    run: RunAgentInput,
    call_ids: Sequence[str],
    groups: Sequence[str] = (),
) -> StreamingResponse:
    """The undo, then its run's two events (no offsets: nothing enters the log); a
    refusal answers its HTTP error before any stream."""
    try:
        result = await gw.conversations.undo(session_id, user_id, call_ids, groups=groups)
    except ConversationRefused as refusal:
        raise refused(refusal, session_id) from None
    events = [
        RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id),
        RunFinishedEvent(
            thread_id=run.thread_id,
            run_id=run.run_id,
            outcome=RunFinishedSuccessOutcome(),
            result={"undone": result.undone},
        ),
    ]

    async def items() -> StreamItems:
        for event in events:
            yield None, event.model_dump(mode="json", by_alias=True, exclude_none=True)

    return sse(items(), bounded=True)


class RevertMarks:
    """Gives each ``TOOL_CALL_RESULT`` of a stream its ``metadata.parley.revertible``:
    whether its call is among the conversation's ``revertible`` (the workflow's own
    answer) as the caller reads it. The state is read at the first result, and again
    for a result at an offset that read had not seen yet."""

    def __init__(
        self, gw: Gateway, session_id: str, user_id: str, groups: Sequence[str] = ()
    ) -> None:
        self._gw = gw
        self._session_id = session_id
        self._query = StateQuery(
            user_id=user_id, transcript_limit=0, audit_limit=0, groups=sorted(set(groups))
        )
        self._revertible: set[str] | None = None
        #: The events the last read saw (offsets below it).
        self._seen = 0

    async def marked(self, items: StreamItems) -> StreamItems:
        """``items``, each result marked."""
        try:
            async for offset, event in items:
                if event.get("type") == "TOOL_CALL_RESULT":
                    event = await self._mark(offset, event)
                yield offset, event
        finally:
            await items.aclose()  # type: ignore[attr-defined]

    async def _mark(self, offset: int | None, event: dict[str, Any]) -> dict[str, Any]:
        if self._revertible is None or (offset is not None and offset >= self._seen):
            try:
                await self._read()
            except ConversationRefused:
                return event  # unknown now: the result goes unmarked
        assert self._revertible is not None
        revertible = str(event.get("toolCallId") or "") in self._revertible
        metadata = {**(event.get("metadata") or {}), PARLEY_KEY: {"revertible": revertible}}
        return {**event, "metadata": metadata}

    async def _read(self) -> None:
        conversations = self._gw.conversations
        snapshot = await conversations.state(self._session_id, self._query.user_id, self._query)
        self._revertible, self._seen = set(snapshot.revertible), snapshot.event_count
