"""The judge step: a call that becomes pending under a rule with a judge
(``PolicyRule.judge``) is judged before a person is asked. Workflow side
(deterministic; the judge runs in the ``parley.judge_call`` activity, called by name).

The rules decided first, by Parley: the judge is asked only about a call whose first
matching rule names it. Its verdict is applied here through
:func:`parley.contracts.judging.judge_outcome`, whatever it says: an approve runs the
call as a decision by ``judge:<model>`` only if the call's arguments are still the ones
it judged, no quorum or reviewer rule holds the call and no ``deny`` rule matches it
(else it is shown as an opinion and the call waits); a deny rejects it with the judge's
reason (the model reads it); an escalate, or no verdict, follows ``on_doubt``. Every
verdict is audited (``judged``: model, verdict, reason, usage) and stays on the call,
and its tokens count as the conversation's usage (``UsageMeter.add_judged``), which the
spending mark reads before the next model call. A call the judge decides counts in
``parley_approvals_requested`` here (it leaves the pending list before the turn that
would count it rests) and in ``parley_approvals_answered`` as it leaves.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError

from parley.contracts import (
    OnTimeout,
    PendingCall,
    PolicyOutcome,
    PolicyRule,
    ToolCall,
    ToolResult,
    text_of,
)
from parley.contracts.activity_config import JUDGE_ACTIVITY
from parley.contracts.judge_calls import JudgeCallInput
from parley.contracts.judging import (
    EXCERPT_MESSAGE_CHARS,
    EXCERPT_MESSAGES,
    JUDGE_CALL,
    ExcerptMessage,
    JudgeVerdict,
    judge_actor,
    judge_outcome,
)
from parley.workflows.context import Records, View
from parley.workflows.record import metrics
from parley.workflows.turn.execution import ToolRunner
from parley.workflows.turn.notifying import Notifier
from parley.workflows.turn.undo import UndoWindow
from parley.workflows.turn.usage import JUDGE_USAGE, UsageMeter

#: Before this patch no rule had a judge.
JUDGE = "judge"


class Judge:
    def __init__(
        self,
        view: View,
        records: Records,
        tools: ToolRunner,
        undo: UndoWindow,
        notifier: Notifier,
        usage: UsageMeter,
    ) -> None:
        self._view, self._state = view, view.state
        self._ledger, self._pending = records.ledger, records.pending
        self._execute, self._undo, self._notifier = tools.execute, undo, notifier
        self._usage = usage

    def _rule(self, outcome: PolicyOutcome) -> PolicyRule | None:
        if outcome.rule is None or outcome.remembered or outcome.policy != "confirm":
            return None
        rules = self._view.catalogue().rules
        rule = next((r for r in rules if r.name == outcome.rule), None)
        return rule if rule is not None and rule.judge is not None else None

    async def review(self, waiting: list[tuple[PendingCall, PolicyOutcome]]) -> None:
        """Judge each call (pending now) whose rule has a judge, then apply each verdict
        in the order the calls were proposed."""
        judged = [
            (call, rule)
            for call, outcome in waiting
            if call.subagent is None and (rule := self._rule(outcome)) is not None
        ]
        if not judged or not workflow.patched(JUDGE):
            return
        verdicts = await asyncio.gather(*(self._judge(call, rule) for call, rule in judged))
        if workflow.patched(JUDGE_USAGE):  # its tokens are the conversation's, whatever it said
            for verdict in verdicts:
                self._usage.add_judged(verdict)
        for (call, rule), verdict in zip(judged, verdicts, strict=True):
            await self._apply(call, rule, verdict)

    async def _judge(self, call: PendingCall, rule: PolicyRule) -> JudgeVerdict:
        shown = next((c for c in self._pending if c.tool_call_id == call.tool_call_id), call)
        request = JudgeCallInput(
            tool_call_id=call.tool_call_id,
            name=call.name,
            args=call.args,
            args_hash=call.args_hash,
            description=call.description,
            rule=rule,
            excerpt=self._excerpt(),
            preview=shown.preview,
        )
        try:
            verdict: JudgeVerdict = await workflow.execute_activity(
                JUDGE_CALL,
                request,
                result_type=JudgeVerdict,
                **JUDGE_ACTIVITY.options(summary=f"judge {call.name} ({call.tool_call_id})"),
            )
        except ActivityError as err:  # no worker answered: doubt, never a failed turn
            cause = err.cause.message if err.cause is not None else str(err)
            return JudgeVerdict(
                verdict="escalate",
                reason=f"no worker answered: {cause}"[:300],
                model=rule.judge_model or "none",
                args_hash=call.args_hash,
                failed=True,
            )
        return verdict

    def _excerpt(self) -> list[ExcerptMessage]:
        """The latest messages, each cut: what the judge reads as untrusted data."""
        excerpt = []
        for message in self._state.transcript.messages[-EXCERPT_MESSAGES:]:
            text = text_of(message)
            calls = getattr(message, "tool_calls", None) or []
            if calls:
                text += " [proposes: " + ", ".join(c["name"] for c in calls) + "]"
            excerpt.append(ExcerptMessage(role=message.type, text=text[:EXCERPT_MESSAGE_CHARS]))
        return excerpt

    def _deny_rule(self, call: PendingCall) -> str | None:
        """A ``deny`` rule that matches the call, wherever it stands in the file."""
        at = call.proposed_at or workflow.now()
        for rule in self._view.catalogue().rules:
            if rule.decide == "deny" and rule.matches(call.name, call.args, at):
                return rule.name
        return None

    async def _apply(self, judged: PendingCall, rule: PolicyRule, verdict: JudgeVerdict) -> None:
        call = next((c for c in self._pending if c.tool_call_id == judged.tool_call_id), None)
        if call is None:  # answered meanwhile
            return
        outcome = judge_outcome(
            verdict,
            rule,
            call.args_hash,
            approvals_needed=call.approvals_needed,
            reviewer_rule=call.reviewer_rule,
            deny_rule=self._deny_rule(call),
        )
        verdict = verdict.model_copy(update={"outcome": outcome})
        actor = judge_actor(verdict.model)
        detail = verdict.model_dump(mode="json", exclude_none=True, exclude={"model"})
        self._ledger.audit(
            "judged", actor, call.tool_call_id, call.name, {"model": verdict.model, **detail}
        )
        call.judged = verdict
        if outcome in ("ran", "rejected"):  # requested, and answered by the judge
            metrics.approvals_requested(1)
        if outcome == "ran":
            self._pending.remove([call])
            decided = {"action": "approve", "args_hash": call.args_hash, "judge": verdict.model}
            self._ledger.audit("decided", actor, call.tool_call_id, call.name, decided)
            plain = ToolCall(tool_call_id=call.tool_call_id, name=call.name, args=call.args)
            if call.undo_seconds:
                self._undo.schedule([(plain, call.undo_seconds)], actor)
            if await self._undo.wait_out(plain):
                await self._execute(
                    plain, approved_by=actor, proposed_at=call.proposed_at, judged=verdict
                )
        elif outcome == "rejected":
            self._pending.remove([call])
            why = verdict.reason
            content = (
                f"A judge ({verdict.model}, for rule `{rule.name}`) "
                + ("denied" if not verdict.failed else "gave no verdict on")
                + f" this call to {call.name}; it did not run. Its reason: {why}. "
                "Do not retry it unless the user asks you to."
            )
            payload = {"decision": "reject", "message": why, "by": actor}
            result = ToolResult(status="rejected", content=content, payload=payload)
            detail = {"action": "reject", "message": why, "judge": verdict.model}
            self._ledger.answer(call, result, "decided", detail=detail, actor=actor, judged=verdict)
        elif outcome == "waits" and rule.escalate_to:
            self._escalate(call, rule.escalate_to, actor)

    def _escalate(self, call: PendingCall, person: str, actor: str) -> None:
        """The judge is in doubt: ``person`` (the rule's ``escalate_to``) is told, and
        may decide the call as one it was escalated to."""
        seconds = (call.expires_at - workflow.now()).total_seconds()
        if call.on_timeout is None:
            call.on_timeout = OnTimeout(action="expire", seconds=max(seconds, 1.0))
        call.on_timeout.escalate_to = person
        self._pending.escalate(call, call.expires_at)
        until = call.expires_at.isoformat()
        self._ledger.audit(
            "escalated", actor, call.tool_call_id, call.name, {"to": person, "until": until}
        )
        self._notifier.escalate([call])
