"""The ``preview_call`` activity: what a pending call would change; and ``inverse_call``:
the call that takes back one that ran. Activity side.

The workflow runs it when a call becomes pending (and again after an edit) for a tool
whose spec says ``has_preview``; its result is shown with the call and its hash is part
of what a decision approves. The tool's preview (``ParleyTool.preview``) reads its
target and changes nothing, so a retried attempt is harmless.

Whatever goes wrong with the tool's own preview is an answer, not a failure: a
:class:`ToolPreview` with status ``failed`` and a one-line, redacted error. Only a
transient failure (a backend's 503, a timeout) is retried, by Temporal, while attempts
remain (``PREVIEW_ACTIVITY``); the last attempt reports it as failed. So the activity
fails only when the worker does (a timeout, a lost worker): never for a tool's error.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from parley.contracts import (
    INVERSE_CALL,
    PREVIEW_ACTIVITY,
    PREVIEW_CALL,
    WORKFLOW_ID_PREFIX,
    InverseAnswer,
    InverseCallInput,
    PreviewCallInput,
    ToolContext,
    ToolPreview,
    args_hash,
)
from parley.contracts.errors import ErrorType
from parley.tools import ToolRegistry


class PreviewActivities:
    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry

    @activity.defn(name=PREVIEW_CALL)
    async def preview_call(self, request: PreviewCallInput) -> ToolPreview:
        """The preview of one pending call (see the module docstring)."""
        refusal = self._refusal(request)
        if refusal is not None:
            return ToolPreview.failed(refusal, ErrorType.TOOL_FAILED, args_hash=request.args_hash)
        preview = await self._registry.preview(request.name, request.args, context_of(request))
        if preview is None:  # _refusal checked the tool has one
            return ToolPreview.failed(
                f"{request.name} declares no preview on this worker", args_hash=request.args_hash
            )
        if preview.error_type == ErrorType.TOOL_TRANSIENT and _attempts_left():
            raise ApplicationError(
                f"the preview of {request.name} failed for now: {preview.error}",
                type=ErrorType.TOOL_TRANSIENT,
            )
        if preview.status == "failed":
            activity.logger.info(
                "preview of %s failed: %s",
                request.name,
                preview.error,
                extra={"tool_call_id": request.tool_call_id, "tool": request.name},
            )
        return preview

    @activity.defn(name=INVERSE_CALL)
    async def inverse_call(self, request: InverseCallInput) -> InverseAnswer:
        """The inverse of a call that ran (``ParleyTool.compensate``), its arguments in
        its tool's canonical form; or why there is none (an answer, never a failure)."""
        registered = self._registry.get(request.name)
        if registered is None:
            return InverseAnswer(reason=f"tool {request.name!r} is not on this worker")
        if registered.compensate is None:
            return InverseAnswer(reason=f"{request.name} declares no inverse")
        if request.subagent is not None:
            spec = self._registry.subagent(request.subagent)
            if spec is None or not spec.allows(request.name):
                return InverseAnswer(reason=f"subagent {request.subagent!r} may not use it")
        try:
            inverse = self._registry.inverse(request.name, request.args, request.payload)
        except (ValueError, TypeError) as err:  # a toolset's bug, said in one line
            return InverseAnswer(reason=f"its inverse cannot be made: {err}")
        if inverse is None:
            return InverseAnswer(reason="that run changed nothing to take back")
        return InverseAnswer(inverse=inverse)

    def _refusal(self, request: PreviewCallInput) -> str | None:
        """Why this worker gives no preview of this call: a tool it lacks or that
        declares none, one the subagent may not use, arguments not the ones named."""
        registered = self._registry.get(request.name)
        if registered is None:
            return f"tool {request.name!r} is not registered on this worker"
        if registered.preview is None:
            return f"{request.name} declares no preview on this worker"
        if request.subagent is not None:
            spec = self._registry.subagent(request.subagent)
            if spec is None or not spec.allows(request.name):
                return f"subagent {request.subagent!r} may not use {request.name} on this worker"
        digest = args_hash(request.args)
        if digest != request.args_hash:
            return (
                f"no preview of {request.name}: its arguments hash to {digest}, not to "
                f"{request.args_hash}"
            )
        return None


def context_of(request: PreviewCallInput) -> ToolContext:
    """Whom the preview reads for: the call's user and conversation (the same context
    the call itself will run with, so a preview sees what the run will see)."""
    workflow_id = WORKFLOW_ID_PREFIX + request.session_id
    return ToolContext(
        user_id=request.user_id,
        session_id=request.session_id,
        workflow_id=workflow_id,
        tool_call_id=request.tool_call_id,
    )


def _attempts_left() -> bool:
    """Whether Temporal will try this activity again if it fails (never outside one:
    a direct call reports at once)."""
    if not activity.in_activity():
        return False
    maximum = PREVIEW_ACTIVITY.retry.maximum_attempts
    return maximum == 0 or activity.info().attempt < maximum
