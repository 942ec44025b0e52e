"""Subagents: a call to one of the catalogue's subagents starts a child conversation (a
child ``ConversationWorkflow``) with the task, and the turn waits until it comes to
rest. Workflow side (deterministic; the child and its signals are addressed by name,
``CONVERSATION_WORKFLOW``, ``DECIDE_SIGNAL`` and ``SUBAGENT_REPORT_SIGNAL``, with the
child's result type given: the commands are those a typed reference makes, and this
module need not import the workflow that runs it).

The child's calls that wait for a decision join this conversation's pending list
(marked with the subagent); a decision on them is passed on to the child
(``decide_signal``), which runs them through its own gate and reports again
(``subagent_report``). The child's reply, when it ends, answers the call that started
it. In a child, :meth:`Subagents.report_to_parent` sends those reports. ``Subagents`` is
the one writer of ``ConversationState.delegations``: a report that arrives by signal
comes in through :meth:`Subagents.receive`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError

from parley.contracts import (
    ConversationSnapshot,
    ConversationStart,
    DecideInput,
    Decision,
    Delegation,
    SubagentRef,
    SubagentReport,
    SubagentTask,
    ToolCall,
    ToolResult,
    TurnToolResult,
    Usage,
    subagent_session_id,
    workflow_id_for,
)
from parley.contracts.errors import ErrorType
from parley.contracts.names import CONVERSATION_WORKFLOW, DECIDE_SIGNAL, SUBAGENT_REPORT_SIGNAL
from parley.workflows.context import Records, View
from parley.workflows.record import metrics
from parley.workflows.record.ledger import error_result
from parley.workflows.turn.undo import drop_subagent_windows


class Subagents:
    """The subagents at work for one conversation (``state.delegations.active``) and, in a
    subagent's own conversation, its reports to the parent."""

    def __init__(self, view: View, records: Records) -> None:
        self._state, self._start, self._catalogue = view.state, view.start, view.catalogue
        self._ledger, self._pending, self._tally = records.ledger, records.pending, records.tally
        #: The child workflows of ``state.delegations.active``, by the call that started each.
        self._children: dict[str, workflow.ChildWorkflowHandle[Any, ConversationSnapshot]] = {}

    async def delegate(self, call: ToolCall, args: dict[str, Any]) -> None:
        """Start the subagent's conversation (a child workflow) with the task, and wait
        until it comes to rest: ended (its reply answers ``call``) or waiting for
        decisions (its calls join the pending list)."""
        state = self._state
        spec = self._catalogue().subagent(call.name)
        assert spec is not None
        session = subagent_session_id(state.session_id, spec.name, self._tally.subagent())
        task = SubagentTask(
            name=spec.name,
            task=str(args.get("task", "")),
            parent_workflow_id=workflow.info().workflow_id,
            tool_call_id=call.tool_call_id,
            instructions=spec.instructions,
            spent_before=state.tree_usage().total_tokens + self._spent_before(),
            spend_mark=state.spend_mark or self._inherited_mark(),
        )
        try:
            handle: workflow.ChildWorkflowHandle[Any, ConversationSnapshot]
            handle = await workflow.start_child_workflow(
                CONVERSATION_WORKFLOW,
                ConversationStart(
                    session_id=session,
                    user_id=state.user_id,
                    reviewers=state.reviewers,
                    pending_expiry_seconds=self._start.pending_expiry_seconds,
                    max_model_calls_per_turn=self._start.max_model_calls_per_turn,
                    continue_as_new_after_events=self._start.continue_as_new_after_events,
                    subagent=task,
                ),
                id=workflow_id_for(session, subagent=True),
                result_type=ConversationSnapshot,
                # Should this conversation close without ending it (terminated), Temporal
                # cancels it; an ended conversation cancels it itself.
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                static_summary=f"subagent {spec.name} of {state.session_id}",
            )
        except WorkflowAlreadyStartedError:
            text = f"subagent {spec.name} could not start: {session} is already running"
            self._ledger.answer(call, error_result(ErrorType.SUBAGENT_FAILED, text), "failed")
            return
        self._children[call.tool_call_id] = handle
        state.delegations.active.append(
            Delegation(name=spec.name, session_id=session, tool_call_id=call.tool_call_id)
        )
        self._ledger.audit(
            "delegated", "parley", call.tool_call_id, call.name, {"session_id": session}
        )
        await self._wait_for_subagents([call.tool_call_id])
        self.apply_news()

    async def pass_on(
        self, decisions: dict[str, list[Decision]], decided_by: str, groups: list[str]
    ) -> dict[str, str]:
        """Send each subagent the decisions on its calls (by the call that started it),
        as ``decided_by`` with their verified ``groups`` (the subagent's reviewers are
        the parent's), then wait until each has come to rest again. Returns why, by the call that
        started it, each subagent that refused its decisions did so (nothing of them
        was applied there)."""
        for tool_call_id, given in decisions.items():
            handle = self._children.get(tool_call_id)
            if handle is None or handle.done():
                continue  # it ended: its end is applied below
            try:
                await handle.signal(
                    DECIDE_SIGNAL,
                    DecideInput(decisions=given, decided_by=decided_by, groups=groups),
                )
            except Exception as err:  # it ended meanwhile: its end is applied below
                workflow.logger.info("could not pass decisions on to a subagent: %s", err)
        await self._wait_for_subagents(list(decisions))
        refused = {
            r.tool_call_id: r.refused
            for r in self._state.delegations.reports
            if r.refused is not None and r.tool_call_id in decisions
        }
        self.apply_news()
        return refused

    def receive(self, report: SubagentReport) -> None:
        """A subagent's report (the ``subagent_report`` signal): kept until applied; one
        from a subagent no longer at work is dropped (its end has been applied)."""
        if self._delegation(report.tool_call_id) is not None:
            self._state.delegations.reports.append(report)

    async def _wait_for_subagents(self, tool_call_ids: list[str]) -> None:
        await workflow.wait_condition(lambda: all(self._news_from(i) for i in tool_call_ids))

    def has_news(self) -> bool:
        """Whether a subagent at work has reported, or ended, since its news was applied."""
        return any(self._news_from(d.tool_call_id) for d in self._state.delegations.active)

    def _news_from(self, tool_call_id: str) -> bool:
        delegation = self._delegation(tool_call_id)
        handle = self._children.get(tool_call_id)
        if delegation is None or handle is None or handle.done():
            return True
        return any(
            r.tool_call_id == tool_call_id and r.sequence > delegation.reports_seen
            for r in self._state.delegations.reports
        )

    def _delegation(self, tool_call_id: str) -> Delegation | None:
        return next(
            (d for d in self._state.delegations.active if d.tool_call_id == tool_call_id), None
        )

    def apply_news(self) -> None:
        """Apply the subagents' reports, in order (their waiting calls replace the ones
        they reported before), then the end of those that ended."""
        state = self._state
        reports, state.delegations.reports = state.delegations.reports, []
        for report in reports:
            delegation = self._delegation(report.tool_call_id)
            if delegation is None or report.sequence <= delegation.reports_seen:
                continue  # from a subagent that has ended, or already applied
            delegation.reports_seen = report.sequence
            ref = SubagentRef(
                name=delegation.name,
                session_id=delegation.session_id,
                tool_call_id=delegation.tool_call_id,
            )
            if report.usage is not None:
                delegation.usage = report.usage
            self._pending.replace_for_subagent(
                delegation.tool_call_id,
                [c.model_copy(update={"subagent": ref}) for c in report.pending],
            )
            self._ledger.add_results(report.results)
        for delegation in list(state.delegations.active):
            handle = self._children.get(delegation.tool_call_id)
            if handle is None or handle.done():
                self._end_delegation(delegation, handle)

    def _end_delegation(
        self,
        delegation: Delegation,
        handle: workflow.ChildWorkflowHandle[Any, ConversationSnapshot] | None,
    ) -> None:
        """A subagent's conversation ended: its reply (or why it has none) answers the
        call that started it."""
        state = self._state
        state.delegations.active.remove(delegation)
        self._children.pop(delegation.tool_call_id, None)
        drop_subagent_windows(state, delegation.tool_call_id)
        self._pending.remove(self._pending.of_subagent(delegation.tool_call_id))
        why = "its conversation is gone"
        snapshot: ConversationSnapshot | None = None
        if handle is not None:
            try:
                snapshot = handle.result()
            except BaseException as err:  # ChildWorkflowError, or it was cancelled
                cause = getattr(err, "cause", None) or err
                why = f"its conversation {delegation.session_id} did not end well: {cause}"
        self._count_ended(snapshot.usage if snapshot is not None else delegation.usage)
        last = snapshot.last_turn if snapshot else None
        if last is not None:
            self._ledger.add_results(last.results)
        call = ToolCall(tool_call_id=delegation.tool_call_id, name=delegation.name)
        if last is not None and last.status == "completed":
            content = last.reply or f"(subagent {delegation.name} finished without a word)"
            payload = {"subagent": delegation.session_id}
            result = ToolResult(status="success", content=content, payload=payload)
            self._ledger.answer(call, result, "ran")
        else:
            if last is not None and last.error:
                why = last.error
            elif last is not None:
                why = f"its conversation ended with calls still {last.status}"
            text = f"subagent {delegation.name} could not finish its task: {why}"
            result = error_result(ErrorType.SUBAGENT_FAILED, text)
            self._ledger.answer(call, result, "failed")
        metrics.tool_ran(delegation.name, result.status)

    def _count_ended(self, usage: Usage | None) -> None:
        """What a subagent that ended (or was stopped) used stays in this tree's usage."""
        if usage is not None:
            ended = self._state.delegations.ended_usage
            self._state.delegations.ended_usage = usage if ended is None else ended + usage

    def _spent_before(self) -> int:
        """In a subagent's conversation: what its parent's tree had used before it."""
        return self._start.subagent.spent_before if self._start.subagent else 0

    def _inherited_mark(self) -> int | None:
        return self._start.subagent.spend_mark if self._start.subagent else None

    def stop(self, why: str) -> None:
        """Cancel every subagent at work (what it waits for never runs) and answer the
        calls that started them, unless already answered: the turn failed closed, or
        the conversation ended."""
        state = self._state
        answered = {m.tool_call_id for m in state.transcript.messages if isinstance(m, ToolMessage)}
        for delegation in state.delegations.active:
            handle = self._children.pop(delegation.tool_call_id, None)
            if handle is not None and not handle.done():
                handle.cancel()
            if delegation.tool_call_id not in answered:
                call = ToolCall(tool_call_id=delegation.tool_call_id, name=delegation.name)
                self._ledger.answer_unrun(call, f"subagent {delegation.name} was stopped: {why}")
            self._count_ended(delegation.usage)  # as it last reported
        state.delegations.active = []
        state.delegations.reports = []
        drop_subagent_windows(state)
        self._pending.remove_subagents()

    async def report_to_parent(
        self, results: list[TurnToolResult] | None = None, refused: str | None = None
    ) -> None:
        """In a subagent's conversation: tell the parent which calls wait for a decision
        (``subagent_report``), and why the decisions it passed on were refused, if they
        were. A parent that has ended is told nothing."""
        state = self._state
        task = self._start.subagent
        assert task is not None
        state.delegations.reports_sent += 1
        report = SubagentReport(
            tool_call_id=task.tool_call_id,
            sequence=state.delegations.reports_sent,
            pending=list(state.pending),
            results=results or [],
            usage=state.tree_usage(),
            refused=refused,
        )
        try:
            await workflow.get_external_workflow_handle(task.parent_workflow_id).signal(
                SUBAGENT_REPORT_SIGNAL, report
            )
        except Exception as err:
            workflow.logger.info("could not report to the parent conversation: %s", err)
