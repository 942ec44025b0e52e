"""Decisions: a ``decide`` (update or signal) applied to the pending calls. Workflow
side (deterministic; edits are made canonical by the ``canonical_args`` activity).

An edit is a new proposal: :meth:`Decisions.review_edits` has the worker put the edited
arguments in canonical form and judges them with ``triage`` and the editor, before
anything is applied; a refused edit refuses the whole decision. :meth:`Decisions.apply`
then answers every pending call: approve and edit run through the engine's one path
(``execute``), reject and respond are answered at once, a subagent's calls are passed
on to its conversation, and a remembered decision is kept for later calls of its shape.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from langchain_core.messages import AIMessage
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from parley.contracts import (
    CANONICAL_ARGS,
    SPEND_CALL,
    Approval,
    CanonicalArgsInput,
    CanonicalArgsOutput,
    DecideInput,
    Decision,
    PendingCall,
    ToolCall,
    ToolResult,
    args_hash,
)
from parley.contracts.activity_config import CANONICAL_ARGS_ACTIVITY
from parley.contracts.errors import InvalidDecision
from parley.workflows.context import Records, View
from parley.workflows.record import metrics
from parley.workflows.rules.triage import Refuse, Run, Verdict, Wait, triage
from parley.workflows.turn.execution import ToolRunner, TurnFailed
from parley.workflows.turn.grants import Grants
from parley.workflows.turn.judging import Judge
from parley.workflows.turn.previews import Previews
from parley.workflows.turn.spending import SpendGate
from parley.workflows.turn.subagents import Subagents
from parley.workflows.turn.undo import REMEMBERED_UNDO, UndoWindow

#: The patch under which an edit is a new proposal (``canonical_args``, then the rules);
#: histories recorded before it replay the old way (the edit ran as given).
EDITS_ARE_PROPOSALS = "edits-are-proposals"
#: An edit's arguments are made canonical by a local activity (milliseconds of pure
#: validation on the worker that runs the workflow task: one marker event, no round
#: trip through the server); histories recorded before it replay the activity.
CANONICAL_ARGS_LOCAL = "canonical-args-local"


class DecisionJobs(NamedTuple):
    """What applying a decision runs through: the one path that runs a tool, the spend
    gate (a spending call's decision) and the subagents (their calls' decisions)."""

    tools: ToolRunner
    spend: SpendGate
    subagents: Subagents
    previews: Previews
    undo: UndoWindow
    judge: Judge | None = None


class Decisions:
    """Applies decisions; ``state`` is read only (a remembered decision is kept by
    ``grants``)."""

    def __init__(self, view: View, records: Records, jobs: DecisionJobs) -> None:
        self._state, self._start, self._view = view.state, view.start, view
        self._ledger, self._pending, self._tally = records.ledger, records.pending, records.tally
        self._execute, self._spend, self._subagents = jobs.tools.execute, jobs.spend, jobs.subagents
        self._previews, self._undo, self._judge = jobs.previews, jobs.undo, jobs.judge
        self._grants = Grants(view, records)

    async def _canonical_args(
        self, request: CanonicalArgsInput, *, summary: str
    ) -> CanonicalArgsOutput:
        if workflow.patched(CANONICAL_ARGS_LOCAL):
            local: CanonicalArgsOutput = await workflow.execute_local_activity(
                CANONICAL_ARGS,
                request,
                result_type=CanonicalArgsOutput,
                **CANONICAL_ARGS_ACTIVITY.local_options(summary=summary),
            )
            return local
        output: CanonicalArgsOutput = await workflow.execute_activity(
            CANONICAL_ARGS,
            request,
            result_type=CanonicalArgsOutput,
            **CANONICAL_ARGS_ACTIVITY.options(summary=summary),
        )
        return output

    async def review_edits(self, decide: DecideInput) -> dict[str, tuple[ToolCall, Verdict]]:
        """Each edit as a new proposal: its arguments made canonical by the worker, then
        judged by the same rules (``triage``, with the editor). Any edit refused (the
        arguments do not fit, or a rule denies them) refuses the whole decision, naming
        why; nothing is applied."""
        edits = [d for d in decide.decisions if d.action == "edit"]
        if not edits or not workflow.patched(EDITS_ARE_PROPOSALS):
            return {}
        pending = {call.tool_call_id: call for call in self._state.pending}
        reviews: dict[str, tuple[ToolCall, Verdict]] = {}
        problems: list[str] = []
        for decision in edits:
            call = pending[decision.tool_call_id]
            subagent = call.subagent.name if call.subagent else None
            if subagent is None and self._start.subagent is not None:
                subagent = self._start.subagent.name
            try:
                output = await self._canonical_args(
                    CanonicalArgsInput(name=call.name, args=decision.args or {}, subagent=subagent),
                    summary=f"canonical_args {call.name} (an edit of {call.tool_call_id})",
                )
            except ActivityError as err:
                cause = err.cause
                why = cause.message if isinstance(cause, ApplicationError) else str(cause)
                problems.append(f"edited args for {call.tool_call_id} are invalid: {why}")
                continue
            edited = ToolCall(tool_call_id=call.tool_call_id, name=call.name, args=output.args)
            if call.approvals_needed > 1 and output.args == call.args:
                problems.append(
                    f"the edit of {call.tool_call_id} leaves its arguments as they are "
                    "(canonical form); approve it instead"
                )
                continue
            catalogue = self._view.catalogue()
            if call.subagent is not None:
                catalogue = catalogue.for_subagent(call.subagent.name)
            verdict = triage(
                edited,
                self._view.proposal(catalogue),
                edited_by=decide.decided_by,
                groups=decide.groups,
            )
            if isinstance(verdict, Refuse):
                problems.append(f"the edit of {call.tool_call_id} is refused: {verdict.message}")
            reviews[call.tool_call_id] = (edited, verdict)
        if problems:
            raise InvalidDecision(
                "decision refused: " + "; ".join(problems) + ". Nothing was applied; the "
                "calls still wait."
            )
        return reviews

    async def review_previews(self, decide: DecideInput) -> None:
        """Each approved call's preview, computed again: one that changed refuses the
        decision, nothing applied (``previews``)."""
        await self._previews.recheck(decide)

    async def apply(self, decide: DecideInput, edits: dict[str, tuple[ToolCall, Verdict]]) -> None:
        by_id = {d.tool_call_id: d for d in decide.decisions}
        pending = self._pending.take_all()
        for call in pending:  # the calls this decision does not name wait on
            if call.tool_call_id not in by_id:
                self._pending.add(call)
        pending = [call for call in pending if call.tool_call_id in by_id]
        self._tally.decisions(len(pending))
        own = [call for call in pending if call.subagent is None]
        owner_ai = self._ai_message_of(own[0].tool_call_id) if own else None
        passed_on: dict[str, list[Decision]] = {}
        #: A subagent's calls are audited once it applied (or refused) the decisions.
        passed_calls: list[tuple[PendingCall, dict[str, Any]]] = []
        quorums = {
            call.tool_call_id: [a.by for a in call.approvals]
            for call in own
            if call.approvals and by_id[call.tool_call_id].action == "approve"
        }
        self._undo.schedule(self._windows(own, by_id, edits), decide.decided_by, quorums)
        try:
            for call in pending:
                decision = by_id[call.tool_call_id]
                edit = edits.get(call.tool_call_id)
                if edit is not None:  # the canonical arguments, passed on as such
                    decision = decision.model_copy(update={"args": edit[0].args})
                metrics.decided(decision.action)
                detail = decision.model_dump(exclude_none=True, exclude_defaults=True)
                detail["args_hash"] = args_hash(edit[0].args) if edit else call.args_hash
                if decision.action == "approve" and call.approvals_needed > 1:
                    count = len(call.approvals) + 1
                    detail["approvals"] = f"{count} of {call.approvals_needed}"
                if decide.link is not None:
                    detail["link"] = decide.link
                if call.subagent is not None:  # its conversation applies (and remembers) it
                    detail["subagent"] = call.subagent.session_id
                    passed_on.setdefault(call.subagent.tool_call_id, []).append(decision)
                    passed_calls.append((call, detail))
                    continue
                self._ledger.audit(
                    "decided", decide.decided_by, call.tool_call_id, call.name, detail
                )
                if decision.remember:
                    self._remember(call, decision, decide.decided_by)
                await self._apply_one(call, decision, decide.decided_by, edit)
        except TurnFailed:
            if owner_ai is not None:
                self._ledger.abandon_unanswered(owner_ai)
            raise
        if passed_on:
            refused = await self._subagents.pass_on(passed_on, decide.decided_by, decide.groups)
            for call, detail in passed_calls:
                assert call.subagent is not None
                why = refused.get(call.subagent.tool_call_id)
                if why is None:
                    self._ledger.audit(
                        "decided", decide.decided_by, call.tool_call_id, call.name, detail
                    )
                    if call.name == SPEND_CALL and by_id[call.tool_call_id].action == "approve":
                        self._spend.raise_mark(call)  # the mark holds for the whole tree
                    continue
                detail = {**detail, "type": InvalidDecision.error_type, "message": why}
                self._ledger.audit(
                    "decision_refused", decide.decided_by, call.tool_call_id, call.name, detail
                )

    def _windows(
        self,
        calls: list[PendingCall],
        by_id: dict[str, Decision],
        edits: dict[str, tuple[ToolCall, Verdict]],
    ) -> list[tuple[ToolCall, int]]:
        """The calls this decision lets run whose rule gives them an undo window."""
        windows: list[tuple[ToolCall, int]] = []
        for call in calls:
            action, edit = by_id[call.tool_call_id].action, edits.get(call.tool_call_id)
            if call.name == SPEND_CALL:
                continue
            if action == "approve" and call.undo_seconds:
                if len(call.approvals) + 1 >= call.approvals_needed:  # the quorum is met
                    windows.append((call, call.undo_seconds))
            elif action == "edit" and edit is not None and isinstance(edit[1], Run):
                outcome = edit[1].outcome
                if outcome.undo_seconds and (
                    not outcome.remembered or workflow.patched(REMEMBERED_UNDO)
                ):
                    windows.append((edit[0], outcome.undo_seconds))
        return windows

    async def _run_approved(self, call: ToolCall, **approval: Any) -> None:
        """An approved call runs, after its undo window if it has one (``undo``)."""
        if await self._undo.wait_out(call):
            await self._execute(call, **approval)

    def _remember(self, call: PendingCall, decision: Decision, decided_by: str) -> None:
        """Later calls of this shape take this decision without asking, while what it
        was given for holds (``grants``, their one writer)."""
        self._grants.remember(call, decision, decided_by)

    async def _apply_one(
        self,
        call: PendingCall,
        decision: Decision,
        decided_by: str,
        edit: tuple[ToolCall, Verdict] | None,
    ) -> None:
        if call.name == SPEND_CALL:
            self._spend.decide(call, decision, decided_by)
        elif decision.action == "approve" and call.approvals_needed > 1:
            await self._approve_quorum(call, decided_by)
        elif decision.action == "approve":
            await self._run_approved(call, approved_by=decided_by, edited_by=call.edited_by)
        elif decision.action == "edit" and edit is None:  # recorded before the patch
            edited = ToolCall(tool_call_id=call.tool_call_id, name=call.name, args=decision.args)
            await self._execute(edited, approved_by=decided_by, edited_by=decided_by)
        elif decision.action == "edit":
            assert edit is not None
            edited, verdict = edit
            if isinstance(verdict, Run | Wait) and verdict.lapsed is not None:
                # The edited shape's remembered decision no longer holds: forgotten and
                # audited as a proposal's is (state only, no command).
                self._grants.lapse(*verdict.lapsed, edited)
            if isinstance(verdict, Wait):  # a new proposal that waits (for a reviewer)
                self._pending.add(verdict.call)
                detail = {"args_hash": verdict.call.args_hash, "edited": True}
                self._ledger.audit("proposed", decided_by, call.tool_call_id, call.name, detail)
                self._ledger.audit_policy(edited, verdict.outcome)
                await self._previews.show([verdict.call])
                if self._judge is not None:  # judged again: these are other arguments
                    await self._judge.review([(verdict.call, verdict.outcome)])
            else:
                assert isinstance(verdict, Run)
                self._ledger.audit_policy(edited, verdict.outcome)
                await self._run_approved(edited, approved_by=decided_by, edited_by=decided_by)
        elif decision.action == "reject":
            reason = ""
            said = (decision.message or "").strip()
            if said:
                reason = f" Their reason: {said}" + ("" if said[-1:] in ".!?。！？" else ".")
            content = (
                f"The user rejected this call to {call.name}; it did not run.{reason} "
                "Do not retry it unless the user asks you to."
            )
            payload = {"decision": "reject", "message": decision.message}
            self._ledger.answer(
                call, ToolResult(status="rejected", content=content, payload=payload), "decided"
            )
        else:  # respond
            payload = {"decision": "respond", "message": decision.message}
            result = ToolResult(status="rejected", content=decision.message or "", payload=payload)
            self._ledger.answer(call, result, "decided")

    async def _approve_quorum(self, call: PendingCall, decided_by: str) -> None:
        """One more reviewer approves these arguments (the gate checked who may, and
        that nobody approves twice): the call runs once the quorum is reached, else it
        waits on, its approvals with it."""
        approvals = [*call.approvals, Approval(by=decided_by, at=workflow.now())]
        if len(approvals) < call.approvals_needed:
            self._pending.add(call.model_copy(update={"approvals": approvals}))
            return
        await self._run_approved(
            call,
            approved_by=decided_by,
            edited_by=call.edited_by,
            approvals=[a.by for a in approvals],
            proposed_at=call.proposed_at,
        )

    def _ai_message_of(self, tool_call_id: str) -> AIMessage | None:
        for message in reversed(self._state.transcript.messages):
            if isinstance(message, AIMessage) and any(
                c["id"] == tool_call_id for c in message.tool_calls
            ):
                return message
        return None
