"""Fork and rewind: a conversation cut to its first N messages. Workflow side
(deterministic; the stored segment of the N messages is written by the owner's client,
``parley.client.forks``, which holds the payload store as every client does).

- :func:`cut_refusal` says whether keeping the first N messages leaves the model a tool
  call without its answer, and names the nearest cuts that do not. Pure: the client runs
  it over the whole transcript chain before it writes anything; the ``rewind`` validator
  judges again what its run can see (:func:`run_refusal`): the window it keeps, exactly,
  for a cut inside it; for an older cut, the kept messages the request brings (the
  window the run will keep), whose every call must be answered among them. The messages
  between those and the window are the client's reading of the chain the run names
  (``seen_context``), as the stored segment of the kept messages is the client's
  writing: a workflow reads no store.
- :func:`first_state` is a conversation's first state: empty, or for a fork the first N
  messages of another (``ConversationStart.forked_from``: their stored segment and the
  last of them), recorded ``forked`` by :meth:`Rewinder.record_fork`.
- :class:`Rewinder` is the ``rewind`` update: its checks (a refused rewind never enters
  history) and the cut itself, after which the run continues as new (``handover``), so
  the run before keeps the whole history, readable by its run id.

Nothing runs again: the kept messages are data, the tools' results among them included.
What is cut away is gone from the model's view; the audit log, the usage and the
remembered decisions stay (they tell what happened, not what the model reads).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

    from parley.contracts import (
        ConversationSnapshot,
        ConversationStart,
        ConversationState,
        StateQuery,
    )
    from parley.contracts.conversation import RewindInput, TranscriptCut
    from parley.contracts.errors import (
        ConversationEnded,
        DecisionsOwed,
        InvalidMessage,
        TurnInProgress,
    )
    from parley.contracts.state import TranscriptWindow
    from parley.workflows.lifecycle.handover import Handover
    from parley.workflows.record.ledger import Ledger
    from parley.workflows.rules import gate

#: The ``CUSTOM`` events a front end sees: the transcript it shows was cut or copied.
REWOUND_EVENT = "parley.rewound"
FORKED_EVENT = "parley.forked"


def unanswered(messages: list[AnyMessage], offset: int, at: int) -> list[str]:
    """The ids of the tool calls that the first ``at`` messages leave without an answer,
    as far as ``messages`` (message ``offset`` first) tell."""
    called: dict[str, int] = {}
    answered: dict[str, int] = {}
    for i, message in enumerate(messages, start=offset):
        if isinstance(message, AIMessage):
            for call in [*message.tool_calls, *message.invalid_tool_calls]:
                if call.get("id"):
                    called[str(call["id"])] = i
        elif isinstance(message, ToolMessage):
            answered[message.tool_call_id] = i
    late = [c for c, i in called.items() if i < at and answered.get(c, at) >= at]
    # An answer kept out whose call is older than these messages: the call is kept in.
    late += [c for c, j in answered.items() if j >= at and c not in called]
    return late


def cut_refusal(messages: list[AnyMessage], offset: int, at: int, total: int) -> str | None:
    """Why keeping the first ``at`` of ``total`` messages is refused (None: it is not).
    ``messages`` are the ones known, message ``offset`` first."""
    if total == 0:
        return "the conversation has no messages yet: nothing to cut"
    if at < 1 or at > total:
        return f"the conversation has {total} messages: keep 1 to {total} of them, not {at}"
    late = unanswered(messages, offset, at)
    if not late:
        return None
    lowest = max(offset, 1)
    below = next(
        (c for c in range(at - 1, lowest - 1, -1) if not unanswered(messages, offset, c)), None
    )
    above = next((c for c in range(at + 1, total + 1) if not unanswered(messages, offset, c)), None)
    nearest = [_described(messages, offset, c, total) for c in (below, above) if c is not None]
    return (
        f"cannot keep the first {at} messages: the model's tool call {', '.join(late)} "
        "would be left without its answer; the nearest cuts that leave none: "
        + (" or ".join(nearest) or "none in the messages kept")
    )


def run_refusal(window: TranscriptWindow, cut: TranscriptCut) -> str | None:
    """Why the run refuses ``cut``, judged from what it holds (None: it does not). A cut
    inside the window is judged exactly: every call kept is in it or answered in it. A
    cut older than the window keeps ``cut.tail`` (its last messages, which become the
    window): a call among them left without its answer among them is refused; calls
    older than the tail the client judged over the whole chain."""
    total = window.length
    if cut.at >= window.offset or total == 0:
        return cut_refusal(window.messages, window.offset, cut.at, total)
    if not cut.tail:
        return (
            f"a cut at message {cut.at}, older than the {len(window.messages)} messages this "
            "run keeps, must bring its last kept messages (the tail)"
        )
    if all(isinstance(m, ToolMessage) for m in cut.tail):
        # Answers follow their call's message at once: a tail with a message of another
        # kind holds the call of the answers next to the cut, and shows a split there.
        return (
            f"the {len(cut.tail)} kept messages this rewind brings are all tool answers: "
            "they cannot show that the cut leaves no call without its answer; bring the "
            "message that made the calls too"
        )
    first = cut.at - len(cut.tail)
    # The tail ends at the cut: none of its calls may be answered after it.
    return (
        cut_refusal(cut.tail, first, cut.at, cut.at)
        if unanswered(cut.tail, first, cut.at)
        else None
    )


def _described(messages: list[AnyMessage], offset: int, cut: int, total: int) -> str:
    if cut == total:
        return f"{cut} (all of them)"
    following = messages[cut - offset] if 0 <= cut - offset < len(messages) else None
    last = messages[cut - 1 - offset] if 0 <= cut - 1 - offset < len(messages) else None
    if isinstance(following, HumanMessage):
        return f"{cut} (before a user message)"
    if isinstance(last, ToolMessage):
        return f"{cut} (after the answers to the model's calls)"
    if isinstance(last, HumanMessage):
        return f"{cut} (after a user message)"
    return f"{cut} (after the model's reply)"


def first_state(start: ConversationStart) -> ConversationState:
    """A new conversation's state; a fork's holds its first messages (by reference)."""
    state = ConversationState(
        session_id=start.session_id, user_id=start.user_id, reviewers=start.reviewers
    )
    if start.forked_from is not None:
        cut = start.forked_from.cut
        state.transcript = TranscriptWindow(
            messages=list(cut.tail), offset=cut.at - len(cut.tail), model_context=cut.context
        )
    return state


class Rewinder:
    def __init__(self, state: ConversationState, ledger: Ledger, handover: Handover) -> None:
        self._state = state
        self._ledger = ledger
        self._handover = handover

    def record_fork(self, start: ConversationStart) -> None:
        """A forked conversation's first audit entry says where it came from."""
        origin = start.forked_from
        if origin is None or start.carried_state is not None:
            return
        detail = {
            "from_session": origin.session_id,
            "at": origin.cut.at,
            "from_run_id": origin.run_id,
        }
        self._ledger.audit("forked", start.user_id, detail=detail)
        self._ledger.events.custom(FORKED_EVENT, detail)

    def check(self, raw: Any) -> RewindInput:
        """The rewind's checks, in its validator and again in its handler."""
        request = gate.parse(RewindInput, raw, InvalidMessage)
        gate.check_owner(self._state, request.user_id)
        state = self._state
        if state.ended:
            raise ConversationEnded("this conversation has ended; fork it into a new session")
        if state.turn_running or state.queued_messages or state.delegations.active:
            raise TurnInProgress(
                "a turn is still running in this conversation; rewind it once the turn is done"
            )
        if state.pending or state.dedup.queued_decisions:
            ids = ", ".join(call.tool_call_id for call in state.pending) or "queued"
            raise DecisionsOwed(
                f"decisions are owed on calls {ids}: decide them first (a rewind never "
                "drops a call someone may be deciding on)"
            )
        transcript = state.transcript
        if request.seen_length != transcript.length or (
            _claim(request.seen_context) != _claim(transcript.model_context)
        ):
            raise TurnInProgress(
                "the conversation moved on since this rewind was prepared; run it again"
            )
        if problem := run_refusal(transcript, request.cut):
            raise InvalidMessage(problem)
        return request

    def rewind(self, raw: Any) -> ConversationSnapshot:
        """Keep the first ``cut.at`` messages; the run then continues as new."""
        request = self.check(raw)  # again: two updates may pass validation together
        state, cut = self._state, request.cut
        transcript = state.transcript
        before = transcript.length
        if cut.at >= transcript.offset:
            del transcript.messages[cut.at - transcript.offset :]
        else:  # the kept messages are older than the ones this run holds
            transcript.messages = list(cut.tail)
            transcript.offset = cut.at - len(cut.tail)
        compaction = transcript.model_context.compaction if transcript.model_context else None
        kept = compaction if compaction is not None and compaction.covers <= cut.at else None
        transcript.model_context = cut.context.model_copy(update={"compaction": kept})
        # What belonged to the messages cut away: nothing of it is owed any more.
        state.client_calls = []
        state.turn_results = []
        state.last_turn = None
        state.counters.rewinds += 1  # the next calls' ids are new (``REWOUND_CALL_ID``)
        detail = {"to": cut.at, "from_length": before, "run_id": workflow.info().run_id}
        self._ledger.audit("rewound", request.user_id, detail=detail)
        self._ledger.events.custom(REWOUND_EVENT, detail)
        self._handover.rewound = True
        return self._ledger.snapshot(
            StateQuery(user_id=request.user_id, transcript_limit=0, audit_limit=1)
        )


def _claim(ref: Any) -> Any:
    return None if ref is None else (ref.claim, ref.length)
