"""Telling people that calls wait: the ``notify`` activity for a turn's new pending
calls, and for a rule's escalation. Workflow side (the activity is called by name).

Each notification runs beside the conversation (the turn's result does not wait for the
webhook); :attr:`Notifier.in_flight` holds it until done, so the run waits for it before
continue-as-new, and a decision stops what no longer needs telling. Every outcome is
audited (``notified``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from parley.contracts import (
    NOTIFY,
    NotifyInput,
    PendingCall,
)
from parley.contracts.activity_config import NOTIFY_ACTIVITY
from parley.workflows.context import View
from parley.workflows.record.ledger import Ledger
from parley.workflows.rules.awaiting import approvers


class Notifier:
    """Tells the worker's webhook; audits, through ``ledger``, what came of it."""

    def __init__(self, view: View, ledger: Ledger) -> None:
        self._view, self._state, self._ledger = view, view.state, ledger
        #: ``notify`` calls in flight: the run waits for them before continue-as-new.
        self.in_flight: set[asyncio.Task[None]] = set()

    def cancel_all(self) -> None:
        """The calls announced are being answered (or the conversation ended)."""
        for task in self.in_flight:
            task.cancel()

    def announce(self, run_id: str) -> None:
        """Tell the worker's webhook (if it has one) that calls wait for a decision. A
        subagent's calls are announced by its parent, where they are decided."""
        if not self._view.catalogue().notifications or self._view.start.subagent is not None:
            return
        self._in_background(
            NotifyInput(
                session_id=self._state.session_id,
                user_id=self._state.user_id,
                pending=list(self._state.pending),
                run_id=run_id,
                reviewers=list(self._state.reviewers),
                approvers=self._approvers(self._state.pending),
            )
        )

    def escalate(self, calls: list[PendingCall]) -> None:
        """Tell each call's ``escalate_to`` that it waits; the caller has extended the
        calls' deadlines."""
        by_person: dict[str, list[PendingCall]] = {}
        for call in calls:
            assert call.on_timeout is not None and call.on_timeout.escalate_to
            by_person.setdefault(call.on_timeout.escalate_to, []).append(call)
        for person, escalated in by_person.items():
            ids = "-".join(c.tool_call_id for c in escalated)
            if not self._view.catalogue().notifications:
                self._ledger.audit(
                    "notified",
                    "worker",
                    detail={"escalated_to": person, "error": "no webhook (PARLEY_NOTIFY_URL)"},
                )
                continue
            self._in_background(
                NotifyInput(
                    session_id=self._state.session_id,
                    user_id=self._state.user_id,
                    pending=escalated,
                    run_id=f"escalate-{ids}",
                    escalated_to=person,
                    approvers=self._approvers(escalated),
                )
            )

    def _approvers(self, calls: list[PendingCall]) -> dict[str, list[str]]:
        """Who may approve each call: only they get its approve link."""
        return {call.tool_call_id: approvers(self._state, call) for call in calls}

    def _in_background(self, request: NotifyInput) -> None:
        task = asyncio.ensure_future(self._send(request))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _send(self, request: NotifyInput) -> None:
        detail: dict[str, Any] = {"run_id": request.run_id}
        if request.escalated_to:
            detail["escalated_to"] = request.escalated_to
        try:
            await workflow.execute_activity(
                NOTIFY,
                request,
                **NOTIFY_ACTIVITY.options(summary=f"notify {len(request.pending)} pending call(s)"),
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                detail["error"] = "decided before the webhook answered; no longer sent"
            else:
                detail["error"] = (
                    cause.message if isinstance(cause, ApplicationError) else str(cause)
                )
        self._ledger.audit("notified", "worker", detail=detail)
