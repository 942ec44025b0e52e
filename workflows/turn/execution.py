"""The one path that runs a tool, before and after a decision (F3), and what a failed
run means. Workflow side (the ``run_tool`` activity is called by name).

:meth:`ToolRunner.execute` runs a call with its canonical arguments and their digest
(``args_hash``, which the worker checks) and answers it through the ledger; a
subagent's tool starts its conversation instead. A failure the model can read (input,
permission) becomes an error result; any other stops the turn closed (:class:`TurnFailed`).
So does a run whose history nears Temporal's limits (:func:`check_history_room`, before
every tool and model call): a turn cannot grow a run until Temporal terminates it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from parley.contracts import (
    RUN_TOOL,
    RunToolInput,
    RunToolOutput,
    ToolCall,
    ToolErrorInfo,
    ToolResult,
    args_hash,
    call_summary,
)
from parley.contracts.activity_config import TOOL_ACTIVITY
from parley.contracts.errors import MODEL_VISIBLE_TOOL_ERRORS, ErrorType
from parley.contracts.judging import JudgeVerdict
from parley.workflows.context import Records, View
from parley.workflows.lifecycle.handover import MB, TURN_HISTORY_BYTES, TURN_HISTORY_EVENTS
from parley.workflows.record import metrics
from parley.workflows.record.ledger import error_result
from parley.workflows.turn.subagents import Subagents

#: ``workflow.patched`` id: a turn stops before a tool or a model call once the run's
#: history nears Temporal's limits (histories recorded before went on).
TURN_HISTORY_ROOM = "turn-history-room"


class TurnFailed(Exception):
    """Stops a turn closed: nothing else runs, the model is not called again."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def check_history_room(next_step: str) -> None:
    """Stop the turn before ``next_step`` if the run's history is past
    ``TURN_HISTORY_BYTES`` or ``TURN_HISTORY_EVENTS``: Temporal terminates a run at
    50 MB or 51,200 events, and a turn cannot continue as new. The run hands over at
    its rest (``handover``), and the conversation goes on there."""
    info = workflow.info()
    size, length = info.get_current_history_size(), info.get_current_history_length()
    if size < TURN_HISTORY_BYTES and length < TURN_HISTORY_EVENTS:
        return
    if not workflow.patched(TURN_HISTORY_ROOM):
        return
    raise TurnFailed(
        f"the turn was stopped before {next_step}: this run's history holds "
        f"{size / MB:.1f} MB in {length:,} events, near what Temporal lets one run hold "
        "(50 MB, 51,200 events); the conversation goes on in a new run, send a new "
        "message to go on",
        ErrorType.HISTORY_LIMIT,
    )


class ToolRunner:
    def __init__(self, view: View, records: Records, subagents: Subagents) -> None:
        self._state, self._start, self._catalogue = view.state, view.start, view.catalogue
        self._ledger, self._tally, self._subagents = records.ledger, records.tally, subagents

    async def execute(
        self,
        call: ToolCall,
        *,
        approved_by: str | None = None,
        edited_by: str | None = None,
        rule: str | None = None,
        approvals: list[str] | None = None,
        proposed_at: datetime | None = None,
        judged: JudgeVerdict | None = None,
    ) -> None:
        """Run a tool with the call's (canonical) arguments, before or after a decision,
        and answer its call; a subagent's tool starts its conversation instead."""
        args = call.args
        check_history_room(f"{call.name} ran")
        if self._catalogue().subagent(call.name) is not None:
            await self._subagents.delegate(call, args)
            return
        self._tally.tool_run()
        stored = None
        try:
            output: RunToolOutput = await workflow.execute_activity(
                RUN_TOOL,
                RunToolInput(
                    name=call.name,
                    args=args,
                    args_hash=args_hash(args),
                    tool_call_id=call.tool_call_id,
                    user_id=self._state.user_id,
                    approved_by=approved_by,
                    approvals=approvals or [],
                    proposed_at=proposed_at,
                    rule=rule,
                    evaluated_at=workflow.now() if rule else None,
                    subagent=self._start.subagent.name if self._start.subagent else None,
                ),
                result_type=RunToolOutput,
                **TOOL_ACTIVITY.options(summary=call_summary(call.name, args)),
            )
            result, stored = output.result, output.stored
        except ActivityError as err:
            result = self._failed(call, err)
        metrics.tool_ran(call.name, result.status)
        detail: dict[str, Any] | None = None
        if edited_by is not None:
            who = "the owner" if edited_by == self._state.user_id else "a reviewer"
            result = result.model_copy(
                update={
                    "content": f"{result.content}\n({edited_by}, {who}, changed the arguments "
                    f"before this ran; it ran with {json.dumps(args, ensure_ascii=False)}.)",
                }
            )
            detail = {"edited_args": args, "edited_by": edited_by}
        self._ledger.answer(call, result, "ran", detail=detail, stored=stored, judged=judged)

    def _failed(self, call: ToolCall, err: ActivityError) -> ToolResult:
        """What a failed ``run_tool`` means: an error the model can read (input,
        permission), or a failure that stops the turn closed."""
        cause = err.cause
        error_type = cause.type if isinstance(cause, ApplicationError) else None
        if not isinstance(cause, ApplicationError) or error_type not in MODEL_VISIBLE_TOOL_ERRORS:
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            failed = error_result(
                error_type or ErrorType.TOOL_FAILED,
                f"{call.name} failed unexpectedly and the turn was stopped: {message}",
            )
            self._ledger.answer(call, failed, "failed")
            metrics.tool_ran(call.name, "failed")
            raise TurnFailed(
                f"tool {call.name} failed: {message}", error_type or ErrorType.TOOL_FAILED
            ) from err
        info = ToolErrorInfo.model_validate(cause.details[0]) if cause.details else None
        return error_result(
            error_type or ErrorType.TOOL_FAILED,
            info.message if info else cause.message,
            http_status=info.http_status if info else None,
            body=info.body if info else None,
        )
