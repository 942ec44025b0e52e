"""Spend approval: a conversation's model use past its mark waits for a decision.
Workflow side (deterministic).

The policy file's ``[budget] confirm_over_tokens = N`` reaches the workflow with the
worker's catalogue. Before each model call, once the conversation's tree (its own model
calls, its rules' judges' and its subagents', ``ConversationState.tree_usage``; in a
subagent's conversation, counted from what its parent's tree had used when the task
began) has used N tokens in all (``parley.workflows.turn.usage``), the call does not
happen: a pending call named ``parley_continue_spending`` asks the owner (or a
reviewer), on every surface that shows pending calls, and is audited like any other.
Approve raises the mark by whole steps past what is used (200,000 → 400,000) and the
turn goes on; reject (or expiry) ends the turn with a reply saying so, and the next
message asks again. Only approve and reject fit it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        SPEND_CALL,
        Decision,
        PendingCall,
        args_hash,
    )
    from parley.workflows.context import Records, View


class SpendGate:
    """The one owner of the spending mark (``ConversationState.spend_mark``)."""

    def __init__(self, view: View, records: Records) -> None:
        self._state, self._start, self._catalogue = view.state, view.start, view.catalogue
        self._ledger, self._pending, self._events = records.ledger, records.pending, records.events
        #: Set when this turn's spending call was rejected or expired: the turn's reply.
        self.declined: str | None = None

    def _step(self) -> int | None:
        budget = self._catalogue().spend
        return budget.confirm_over_tokens if budget is not None else None

    def must_ask(self) -> bool:
        """Before a model call: whether it must wait (a spending call is then pending)."""
        step = self._step()
        task = self._start.subagent
        used = self._state.tree_usage().total_tokens + (task.spent_before if task else 0)
        mark = self._state.spend_mark or (task.spend_mark if task else None) or step
        if step is None or mark is None or used < mark:
            return False
        args = {"total_tokens": used, "mark": mark}
        call = PendingCall(
            tool_call_id=f"parley-spend-{mark}-{self._state.runs}",
            name=SPEND_CALL,
            args=args,
            args_hash=args_hash(args),
            description=(
                f"This conversation's model calls have used {used:,} tokens, past its "
                f"mark of {mark:,}. Approve to go on (the mark rises by {step:,}); "
                "reject to stop this turn."
            ),
            reason=f"confirm because the policy's [budget] confirm_over_tokens = {step:,}",
            expires_at=workflow.now() + timedelta(seconds=self._start.pending_expiry_seconds),
        )
        self._ledger.audit("proposed", "parley", call.tool_call_id, SPEND_CALL, dict(args))
        self._pending.add(call)
        return True

    def decide(self, call: PendingCall, decision: Decision, decided_by: str) -> None:
        """Approve raises the mark by one step; reject ends the turn."""
        detail = {"action": decision.action, **call.args}
        if decision.action == "approve":
            detail["new_mark"] = self.raise_mark(call)
        else:
            reason = f" ({decision.message})" if decision.message else ""
            self.declined = (
                f"Stopped: this conversation passed its mark of {call.args['mark']:,} "
                f"tokens and {decided_by} did not let it go on{reason}."
            )
        # (The decision itself is audited as every decision is: ``decided``.)
        self._ledger.audit("spending", decided_by, call.tool_call_id, SPEND_CALL, detail)

    def raise_mark(self, call: PendingCall) -> int:
        """An approved spending call (this conversation's, or one of its subagents'
        passed on from here): the mark rises by whole steps past what is used, so the
        approved call always happens, here and in the tree."""
        step, mark = self._step() or 1, int(call.args["mark"])
        used = int(call.args["total_tokens"])
        new_mark = mark + step * ((used - mark) // step + 1)
        self._state.spend_mark = max(new_mark, self._state.spend_mark or 0)
        return new_mark

    def expired(self, call: PendingCall) -> bool:
        """A pending call nobody decided on in time: True if it was the spending call
        (the turn then ends), False for a tool call (the ledger answers it)."""
        if call.name != SPEND_CALL:
            return False
        self.declined = (
            f"Stopped: this conversation passed its mark of {call.args['mark']:,} tokens "
            "and nobody decided in time whether it may go on."
        )
        self._ledger.audit("expired", "parley", call.tool_call_id, SPEND_CALL, dict(call.args))
        return True

    def take_declined(self) -> str | None:
        """The reply of a turn whose spending call was rejected or expired (sent as
        the assistant's text), once; None otherwise."""
        declined, self.declined = self.declined, None
        if declined is not None:
            self._events.text_message(f"parley-spend-{self._state.runs}", declined)
        return declined
