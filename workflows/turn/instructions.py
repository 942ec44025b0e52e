"""The agent's instructions as a conversation keeps them. Workflow side (deterministic;
the worker reports its instructions with a ``call_model`` reply, as it does its tool
catalogue).

A run asks at its first model call (:meth:`Instructions.call_fields`: the worker uses its
own and reports them, so the answer is in history) and keeps the answer in
``ConversationState.instructions`` for the rest of the run (:meth:`Instructions.take`);
later calls carry the text. A worker restarted with other instructions replays the run
from its history, so the conversation keeps the instructions it has until it continues
as new. The next run's first model call asks again; other instructions (another name or
hash) are taken then and audited ``instructions_changed`` (from, to). The first
instructions a conversation takes are audited ``instructions``. A subagent's
conversation keeps its own (``SubagentTask.instructions``, in its transcript) and asks
nothing.

A client cannot replace them: it may only add to them, with the message that starts the
conversation (``SendMessageInput.added_instructions``, audited ``instructions_added`` by
its sender when the message enters), and only where the worker allows it: a run asks
with the addition, and a worker that does not allow one refuses the call
(``InstructionsRefused``), so the turn fails in one line and the model is never called
with instructions the deployment did not accept.

Which instructions a run uses is in the workflow's memo (``parley_instructions``: name
and hash, for the Temporal UI; kept with closed runs, carried across continue-as-new,
and no search attribute to register) and in its current details. Asking adds no
command: a history recorded before holds no answer, and replays as it ran.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from parley.contracts import ConversationStart, ConversationState, SendMessageInput
from parley.contracts.errors import InvalidMessage
from parley.contracts.instructions import (
    INSTRUCTIONS_MEMO,
    AgentInstructions,
    WorkerInstructions,
    sha256_of,
    system_text,
)
from parley.workflows.record.ledger import Ledger
from parley.workflows.record.publishing import publish_status


class Instructions:
    def __init__(self, state: ConversationState, start: ConversationStart, ledger: Ledger):
        self._state, self._start, self._ledger = state, start, ledger
        #: Whether this run has taken the worker's answer (once per run).
        self._taken = False

    def call_fields(self) -> dict[str, Any]:
        """What the next ``call_model`` carries of them (``CallModelInput``)."""
        state = self._state
        if self._start.subagent is not None:
            return {}  # a subagent keeps its own (in its transcript)
        if not self._taken:
            return {"ask_instructions": True, "added_instructions": state.added_instructions}
        return {"instructions": system_text(state.instructions, state.added_instructions)}

    def take(self, answer: WorkerInstructions | None) -> None:
        """The worker's answer to a call that asked: kept for the rest of the run."""
        if answer is None or self._taken or self._start.subagent is not None:
            return
        self._taken = True
        state = self._state
        new = answer.instructions
        new_id = new.identity() if new is not None else None
        old = state.instructions
        if old is None:  # the conversation's first
            if new is not None:
                self._ledger.audit("instructions", "parley", detail=new_id)
        elif (old_id := old.identity() if old.text else None) != new_id:
            detail = {"from": old_id, "to": new_id}
            self._ledger.audit("instructions_changed", "parley", detail=detail)
        # None is kept as no instructions, so that a later change is seen as one.
        state.instructions = new or NO_INSTRUCTIONS
        self._publish()

    def _publish(self) -> None:
        """The memo and the current details say which instructions this run uses."""
        current = self._state.instructions
        memo = current.identity() if current is not None and current.text else None
        if workflow.memo().get(INSTRUCTIONS_MEMO) != memo:
            workflow.upsert_memo({INSTRUCTIONS_MEMO: memo})
        publish_status(self._state)


#: What a conversation keeps when the worker has no instructions.
NO_INSTRUCTIONS = AgentInstructions(name="", sha256="", text="")


def check_added(state: ConversationState, message: SendMessageInput) -> None:
    """Only the message that starts a conversation may add to its instructions."""
    if message.added_instructions is None:
        return
    if state.transcript.length or state.counters.turns or state.added_instructions:
        raise InvalidMessage(
            "added_instructions: only the message that starts a conversation may add to "
            "the agent's instructions"
        )
    if not message.added_instructions.strip():
        raise InvalidMessage("added_instructions: empty")


def take_added(state: ConversationState, ledger: Ledger, message: SendMessageInput) -> None:
    """The starting message's addition enters the conversation, audited by its sender."""
    added = message.added_instructions
    if added is None or state.added_instructions is not None:
        return
    state.added_instructions = added
    detail = {"sha256": sha256_of(added), "chars": len(added)}
    ledger.audit("instructions_added", message.user_id, detail=detail)
