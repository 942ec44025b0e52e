"""Reverts: a call that ran, taken back by its tool's declared inverse. Workflow side
(deterministic; the inverse is found by the ``inverse_call`` local activity, on a
worker that holds the tools).

A ``revert`` names a call of this conversation that ran and succeeded. The worker's
registry gives the inverse (``ParleyTool.compensate``: a registered tool and its
canonical arguments) or says why there is none, and the revert is refused with that
reason before anything enters the conversation. Otherwise the revert is a turn: the
request enters the transcript as the sender's message, and Parley proposes the inverse
as an assistant message of its own (call id ``revert-<id>``), which the gate sorts like
any proposal (its own rules: run at once, wait for a decision, or refused). The audit
links both ways: the inverse's ``proposed`` names the call it reverts, and the original
call gets a ``revert_proposed`` entry naming its inverse. A call is reverted once. A
fork holds its origin's messages, not their effects: a call that ran there, before the
cut, is reverted in the origin (refused here, saying so), so its inverse runs once.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from temporalio import workflow

from parley.contracts import (
    INVERSE_ACTIVITY,
    INVERSE_CALL,
    InverseAnswer,
    InverseCall,
    InverseCallInput,
    RevertInput,
)
from parley.contracts.errors import DecisionsOwed, InvalidDecision, TurnInProgress
from parley.workflows.context import Records, View

#: The call id of the inverse proposed for call ``<id>``.
REVERT_PREFIX = "revert-"


class Reverts:
    def __init__(self, view: View, records: Records) -> None:
        self._view, self._state, self._ledger = view, view.state, records.ledger

    def check(self, request: RevertInput) -> None:
        """The ``revert`` update's validator: nothing in flight or waiting, and the call
        may be reverted (``refusal``)."""
        state = self._state
        if state.turn_running:
            raise TurnInProgress("a turn is running; revert once it is done")
        if state.pending:
            raise DecisionsOwed("decide the calls that wait first, then revert")
        refusal = self.refusal(request.tool_call_id, request.user_id)
        if refusal is not None:
            raise refusal

    def revertible(self) -> list[str]:
        """The calls whose results this conversation keeps and that a revert may name
        (``refusal`` finds nothing), oldest first: the ``state`` query's ``revertible``,
        what every surface offers. Whether a turn runs or calls wait is not asked: a
        revert waits for those (``check`` says so)."""
        return [
            message.tool_call_id
            for message in self._state.transcript.messages
            if isinstance(message, ToolMessage)
            and self.refusal(message.tool_call_id, self._state.user_id) is None
        ]

    def refusal(self, call_id: str, user_id: str) -> InvalidDecision | None:
        """Why a revert of ``call_id`` (asked by ``user_id``) is refused, whatever is in
        flight; None: it ran and succeeded here, has an inverse, and was not reverted."""
        if self._proposed(REVERT_PREFIX + call_id) is not None:
            return InvalidDecision(f"{call_id} was already reverted ({REVERT_PREFIX}{call_id})")
        ran = self._result(call_id)
        if ran is None or ran.status != "success" or self._proposed(call_id) is None:
            return InvalidDecision(
                f"{call_id} did not run successfully in this conversation (or is older "
                "than the messages it keeps): there is nothing to revert"
            )
        origin = self._view.start.forked_from
        if origin is not None and self._inherited(call_id, origin.cut.at):
            return InvalidDecision(
                f"{call_id} ran in {origin.session_id} before this conversation was forked "
                "from it: a fork holds its messages, not its effects. Revert it there "
                f"(parley revert --session {origin.session_id} --user {user_id} "
                f"--call {call_id}), once"
            )
        spec = self._view.catalogue().get(str(ran.name))
        if spec is None or not spec.has_inverse:
            return InvalidDecision(f"{call_id} cannot be reverted: {ran.name} declares no inverse")
        return None

    async def inverse_of(self, request: RevertInput) -> InverseCall:
        """The call's inverse, from a worker; a call with none is refused, saying why."""
        call_id = request.tool_call_id
        proposed, ran = self._proposed(call_id), self._result(call_id)
        assert proposed is not None and ran is not None  # the validator checked
        payload = ran.artifact.get("payload") if isinstance(ran.artifact, dict) else None
        subagent = self._view.start.subagent
        answer: InverseAnswer = await workflow.execute_local_activity(
            INVERSE_CALL,
            InverseCallInput(
                name=proposed["name"],
                args=proposed["args"],
                payload=payload,
                subagent=subagent.name if subagent is not None else None,
            ),
            result_type=InverseAnswer,
            **INVERSE_ACTIVITY.local_options(summary=f"inverse of {proposed['name']} {call_id}"),
        )
        if answer.inverse is None:
            raise InvalidDecision(f"{call_id} cannot be reverted: {answer.reason}")
        return answer.inverse

    def propose(self, request: RevertInput, inverse: InverseCall) -> AIMessage:
        """The revert enters the conversation: the sender's message, and Parley's own
        proposal of the inverse (for ``Proposals.handle``, by the sender)."""
        call_id = request.tool_call_id
        name = self._proposed(call_id)["name"]  # type: ignore[index]
        text = f"Revert the call {call_id} ({name}): run its inverse, {inverse.name}."
        detail = {"message_id": f"revert-{call_id}", "reverts": call_id}
        self._ledger.enter(text, f"revert-{call_id}", request.user_id, detail)
        inverse_id = REVERT_PREFIX + call_id
        self._ledger.audit(
            "revert_proposed", request.user_id, call_id, name, {"inverse": inverse_id}
        )
        return AIMessage(
            content=f"Proposing {inverse.name} to revert {call_id}.",
            id=f"parley-ai-{workflow.uuid4().hex[:12]}",
            tool_calls=[
                {"id": inverse_id, "name": inverse.name, "args": inverse.args, "type": "tool_call"}
            ],
        )

    def _proposed(self, call_id: str) -> dict[str, Any] | None:
        for message in self._state.transcript.messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call["id"] == call_id:
                        return dict(call)
        return None

    def _inherited(self, call_id: str, cut: int) -> bool:
        """In a fork: whether the call's result is one of the first ``cut`` messages,
        copied from the origin, and the call never ran here (after a rewind below the
        cut, the messages there are this conversation's own)."""
        transcript = self._state.transcript
        at = next(
            (
                transcript.offset + i
                for i, message in enumerate(transcript.messages)
                if isinstance(message, ToolMessage) and message.tool_call_id == call_id
            ),
            None,
        )
        ran_here = any(
            e.event == "ran" and e.tool_call_id == call_id for e in self._state.audit.entries
        )
        return at is not None and at < cut and not ran_here

    def _result(self, call_id: str) -> ToolMessage | None:
        for message in self._state.transcript.messages:
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                return message
        return None
