"""Previews: what a pending call would change, shown with it and part of what an approval
approves. Workflow side (deterministic; the tool's preview runs in the ``preview_call``
activity, on a worker).

When calls become pending (a model's proposals, an edit that waits for a reviewer) each
one of a tool that declares a preview (``ToolSpec.has_preview``) gets one, computed
after the turn's ``auto`` calls ran, before the turn rests: every surface shows it with
the call. When an approval arrives the preview is computed again: if the target moved on
(another hash) the approval is refused, nothing is applied, and the call waits with the
new preview; under a quorum the approvals given so far go with the old preview (they
were of what is no longer shown). A preview that fails is shown as failed and never
blocks a decision. A subagent's calls get theirs in the subagent's own conversation.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError

from parley.contracts import (
    PREVIEW_ACTIVITY,
    PREVIEW_CALL,
    DecideInput,
    PendingCall,
    PreviewCallInput,
    ToolPreview,
)
from parley.contracts.errors import InvalidDecision
from parley.workflows.context import Records, View

#: Before this patch no call had a preview (and no tool declared one).
TOOL_PREVIEWS = "tool-previews"
#: Before this patch a quorum's approvals survived a preview that changed before the
#: last one, so the call could run on an approval of what was no longer shown.
PREVIEW_VOIDS_APPROVALS = "preview-voids-approvals"


class Previews:
    def __init__(self, view: View, records: Records) -> None:
        self._view, self._pending = view, records.pending

    def _wanted(self, call: PendingCall) -> bool:
        spec = self._view.catalogue().get(call.name)
        return spec is not None and spec.has_preview and call.subagent is None

    async def show(self, calls: list[PendingCall]) -> None:
        """Each of ``calls`` (pending now) with a preview gets one, computed at once."""
        wanted = [call for call in calls if self._wanted(call)]
        if not wanted or not workflow.patched(TOOL_PREVIEWS):
            return
        previews = await asyncio.gather(*(self._compute(call) for call in wanted))
        for call, preview in zip(wanted, previews, strict=True):
            self._pending.show_preview(call.tool_call_id, preview)

    async def recheck(self, decide: DecideInput) -> None:
        """Before a decision is applied: each approved call's preview, computed again.
        One that changed refuses the whole decision (nothing applied) and the call waits
        with its new preview."""
        approved = {d.tool_call_id for d in decide.decisions if d.action == "approve"}
        calls = [
            call
            for call in self._pending
            if call.tool_call_id in approved
            and call.preview is not None
            and call.preview.status == "ok"
            and self._wanted(call)
        ]
        if not calls:
            return
        changed = []
        for call, now in zip(
            calls, await asyncio.gather(*(self._compute(c) for c in calls)), strict=True
        ):
            assert call.preview is not None
            if now.status == "ok" and now.hash != call.preview.hash:
                given = ", ".join(a.by for a in call.approvals)
                void = bool(given) and workflow.patched(PREVIEW_VOIDS_APPROVALS)
                self._pending.show_preview(call.tool_call_id, now, approvals_void=void)
                again = f"; the approvals by {given} no longer count" if void else ""
                changed.append(f"{call.tool_call_id} (now {now.summary(120)}{again})")
        if changed:
            raise InvalidDecision(
                "decision refused: what the call would change is no longer what was shown: "
                + "; ".join(changed)
                + ". Nothing was applied; the calls still wait with their new preview: "
                "read them again."
            )

    async def _compute(self, call: PendingCall) -> ToolPreview:
        state = self._view.state
        subagent = self._view.start.subagent
        request = PreviewCallInput(
            name=call.name,
            args=call.args,
            args_hash=call.args_hash,
            tool_call_id=call.tool_call_id,
            user_id=state.user_id,
            session_id=state.session_id,
            subagent=subagent.name if subagent is not None else None,
        )
        try:
            preview: ToolPreview = await workflow.execute_activity(
                PREVIEW_CALL,
                request,
                result_type=ToolPreview,
                **PREVIEW_ACTIVITY.options(summary=f"preview {call.name} ({call.tool_call_id})"),
            )
        except ActivityError as err:  # the worker could not answer: shown, not blocking
            cause = err.cause.message if err.cause is not None else str(err)
            return ToolPreview.failed(f"no worker answered: {cause}", args_hash=call.args_hash)
        return preview
