"""Fork and rewind: a conversation cut to its first N messages. Workflow side
(deterministic; the stored segment of the N messages is written by the owner's client,
``parley.client.forks``, which holds the payload store as every client does).

- :func:`cut_refusal` (``parley.contracts.cuts``) says whether keeping the first N
  messages leaves the model a tool call without its answer, and names the nearest cuts
  that do not. Pure: the client runs
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
    from langchain_core.messages import ToolMessage

    from parley.contracts import (
        ConversationSnapshot,
        ConversationStart,
        ConversationState,
        StateQuery,
    )
    from parley.contracts.conversation import RewindInput, TranscriptCut
    from parley.contracts.cuts import cut_refusal, unanswered
    from parley.contracts.errors import (
        ConversationEnded,
        DecisionsOwed,
        InvalidMessage,
        TurnInProgress,
    )
    from parley.contracts.state import TranscriptWindow
    from parley.workflows.context import Records, View
    from parley.workflows.lifecycle.handover import Handover
    from parley.workflows.turn.front_end import FrontEnd

#: The ``CUSTOM`` events a front end sees: the transcript it shows was cut or copied.
REWOUND_EVENT = "parley.rewound"
FORKED_EVENT = "parley.forked"


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


def first_state(start: ConversationStart) -> ConversationState:
    """A new conversation's state; a fork's holds its first messages (by reference)."""
    transcript = TranscriptWindow()
    if start.forked_from is not None:
        cut = start.forked_from.cut
        transcript = TranscriptWindow(
            messages=list(cut.tail), offset=cut.at - len(cut.tail), model_context=cut.context
        )
    return ConversationState(
        session_id=start.session_id,
        user_id=start.user_id,
        reviewers=start.reviewers,
        transcript=transcript,
    )


class Rewinder:
    """The ``rewind`` update; the parts of the state it cuts, it cuts through their
    writers (the transcript's, the ledger's, the front end's, the tally's)."""

    def __init__(self, view: View, records: Records, front: FrontEnd, handover: Handover) -> None:
        self._state, self._ledger, self._records = view.state, records.ledger, records
        self._front_end, self._handover = front, handover

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
        self._records.events.custom(FORKED_EVENT, detail)

    def check(self, request: RewindInput) -> RewindInput:
        """The rewind's checks, in its validator and again in its handler, after the
        prologue's (``intake``: parsed, the owner's)."""
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

    def rewind(self, request: RewindInput) -> ConversationSnapshot:
        """Keep the first ``cut.at`` messages; the run then continues as new."""
        self.check(request)  # again: two updates may pass validation together
        cut = request.cut
        before = self._records.transcript.cut(cut)
        # What belonged to the messages cut away: nothing of it is owed any more.
        self._front_end.forget()
        self._ledger.forget_turn()
        self._records.tally.rewound()  # the next calls' ids are new (``REWOUND_CALL_ID``)
        detail = {"to": cut.at, "from_length": before, "run_id": workflow.info().run_id}
        self._ledger.audit("rewound", request.user_id, detail=detail)
        self._records.events.custom(REWOUND_EVENT, detail)
        self._handover.rewound = True
        return self._ledger.snapshot(
            StateQuery(user_id=request.user_id, transcript_limit=0, audit_limit=1)
        )


def _claim(ref: Any) -> Any:
    return None if ref is None else (ref.claim, ref.length)
