"""A model message's proposed calls, sorted: refused, run now, pending, or held for the
front end. Workflow side (deterministic; tools run only through ``execution``).

Each call's arguments arrive canonical from ``call_model``. A call of one of the front
end's own tools (``front_end``) is held for the client's result and never triaged;
every other call is judged by ``triage`` (rules, remembered decisions, the tool's
policy): refused with a reason the model reads, run at once (``auto``, in order, after
all are sorted; one a remembered approval lets run waits out its rule's undo window
first, ``undo``), or added to the pending calls to wait for a decision; a call whose
rule names a judge is judged first (``judging``).
"""

from __future__ import annotations

from langchain_core.messages import AIMessage
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        PREVIEW_ARGS_CHARS,
        PendingCall,
        PolicyOutcome,
        ToolCall,
        args_hash,
    )
    from parley.contracts.errors import ErrorType
    from parley.workflows.context import Records, View
    from parley.workflows.record.ledger import error_result
    from parley.workflows.rules.triage import Refuse, Run, invalid_call_refusal, triage
    from parley.workflows.turn.execution import ToolRunner, TurnFailed
    from parley.workflows.turn.front_end import FrontEnd
    from parley.workflows.turn.grants import Grants
    from parley.workflows.turn.judging import Judge
    from parley.workflows.turn.previews import Previews
    from parley.workflows.turn.undo import REMEMBERED_UNDO, UndoWindow


class Proposals:
    def __init__(
        self,
        view: View,
        records: Records,
        tools: ToolRunner,
        front: FrontEnd,
        previews: Previews,
        undo: UndoWindow,
        judge: Judge | None = None,
    ) -> None:
        self._ledger, self._pending, self._events = records.ledger, records.pending, records.events
        self._tools, self._front_end, self._proposal = tools, front, view.proposal
        self._previews, self._undo, self._judge = previews, undo, judge
        self._grants = Grants(view, records)

    async def handle(
        self, ai: AIMessage, *, proposer: str = "model", detail: dict[str, str] | None = None
    ) -> None:
        """Sort each proposed call (canonical arguments): refused, run now, pending, or
        held for the front end. The pending ones get their previews once the others ran.
        ``proposer`` and ``detail`` go on each ``proposed`` entry (a revert's inverse is
        proposed by the person who asked for it)."""
        to_run: list[tuple[ToolCall, Run]] = []
        waiting: list[tuple[PendingCall, PolicyOutcome]] = []
        for broken in ai.invalid_tool_calls:  # not JSON, or arguments the tool refused
            call = ToolCall(tool_call_id=broken["id"] or "", name=broken["name"] or "unknown")
            raw = (broken["args"] or "")[:PREVIEW_ARGS_CHARS]
            self._ledger.audit("proposed", "model", call.tool_call_id, call.name, {"raw": raw})
            self._ledger.answer(
                call, error_result(ErrorType.TOOL_INPUT, invalid_call_refusal(broken)), "refused"
            )
        proposal = self._proposal()
        for proposed in ai.tool_calls:
            call = ToolCall.of(proposed)
            self._events.tool_call(call.tool_call_id, call.name, call.args, ai.id)
            if self._front_end.owns(call.name):
                self._front_end.hold(call)
                continue
            proposed = {"args_hash": args_hash(call.args), **(detail or {})}
            self._ledger.audit("proposed", proposer, call.tool_call_id, call.name, proposed)
            verdict = triage(call, proposal)
            self._ledger.audit_policy(call, verdict.outcome)
            if isinstance(verdict, Refuse):
                self._ledger.answer(
                    call, error_result(verdict.error_type, verdict.message), "refused"
                )
            elif isinstance(verdict, Run):
                to_run.append((call, verdict))
            else:
                if verdict.lapsed is not None:  # a remembered decision that no longer holds
                    self._grants.lapse(*verdict.lapsed, call)
                self._pending.add(verdict.call)
                waiting.append((verdict.call, verdict.outcome))
        self._schedule_remembered(to_run)
        try:
            for call, run in to_run:
                remembered = run.remembered
                if remembered is not None:  # the user's own earlier decision, recorded
                    self._ledger.audit(
                        "decided",
                        remembered.decided_by,
                        call.tool_call_id,
                        call.name,
                        {"action": "approve", "remembered_from": remembered.tool_call_id},
                    )
                if not await self._undo.wait_out(call):  # undone in its window
                    continue
                await self._tools.execute(
                    call,
                    approved_by=remembered.decided_by if remembered else None,
                    rule=run.outcome.rule,
                )
            await self._previews.show([call for call, _ in waiting])
            if self._judge is not None:  # a rule's judge, before a person is asked
                await self._judge.review(waiting)
        except TurnFailed:
            self._ledger.abandon_unanswered(ai)
            raise

    def _schedule_remembered(self, to_run: list[tuple[ToolCall, Run]]) -> None:
        """The calls a remembered approval lets run whose rule gives an undo window wait
        it out, all from now, as the person who approved them (``undo``)."""
        windows = [
            (call, run.remembered.decided_by, run.outcome.undo_seconds)
            for call, run in to_run
            if run.remembered is not None and run.outcome.undo_seconds
        ]
        if not windows or not workflow.patched(REMEMBERED_UNDO):
            return
        for call, approver, seconds in windows:
            assert seconds is not None
            self._undo.schedule([(call, seconds)], approver)
