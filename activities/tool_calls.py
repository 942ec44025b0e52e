"""The ``run_tool`` and ``canonical_args`` activities. Activity side.

``canonical_args`` puts an edit's arguments in the tool's canonical form (the model's
proposals are put in it by ``call_model``). ``run_tool`` runs only canonical arguments
whose digest is the one approved, looks the tool up in the worker's registry, gives it
the conversation's ``ToolContext`` when it asks for one, and returns the result
envelope. The envelope's status comes from what the tool returned (F4); what it raised is mapped, in
``tool_failure`` and nowhere else, onto the error table of design.md.

Once a tool has run, nothing may make Temporal run it again: ``storable`` checks the
envelope before it is returned. Text Python holds but UTF-8 cannot carry (a lone
surrogate, as ``os.listdir`` returns for an undecodable file name) is escaped; an
envelope over ``max_tool_result_bytes`` is replaced by an error envelope with the
beginning of the content. Anything that still cannot be encoded becomes an error
envelope too. A large envelope below the limit leaves history by reference (Temporal's
external storage, ``parley.storage``). A failure's message is written into history as
is (no store), so it is cut to ``FAILURE_MESSAGE_MAX_CHARS``, and so is its cause's
(``bounded_cause``): a tool (an MCP server's among them) that raises with megabytes of
text costs a few kilobytes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pydantic
from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from parley.activities.heartbeat import heartbeating
from parley.activities.redaction import redact
from parley.contracts import (
    CANONICAL_ARGS,
    MODEL_RESULT_MAX_CHARS,
    RUN_TOOL,
    WORKFLOW_ID_PREFIX,
    CanonicalArgsInput,
    CanonicalArgsOutput,
    RunToolInput,
    RunToolOutput,
    ToolContext,
    ToolErrorInfo,
    ToolResult,
    args_hash,
    evaluate,
)
from parley.contracts.activity_config import TOOL_ACTIVITY, retry_delay
from parley.contracts.errors import (
    ErrorType,
    ToolInputError,
    ToolPermissionError,
    TransientError,
)
from parley.contracts.limits import TOOL_RESULT_MAX_BYTES_DEFAULT, clipped
from parley.observability import tracing
from parley.storage.results import WholeResults, must_keep
from parley.tools import CONTEXT_ARG, ParleyTool, ToolRegistry, UnstableCanonicalForm


class ToolActivities:
    def __init__(
        self,
        registry: ToolRegistry,
        *,
        max_result_bytes: int = TOOL_RESULT_MAX_BYTES_DEFAULT,
        results: WholeResults | None = None,
    ) -> None:
        self._registry = registry
        self._max_result_bytes = max_result_bytes
        #: Where a result longer than its previews is kept whole (None: not kept).
        self._results = results

    def _rule_made_auto(self, request: RunToolInput) -> bool:
        """Whether this worker's own rules, evaluated with the workflow's inputs, make
        the call ``auto`` by the rule the workflow named."""
        if request.rule is None or request.evaluated_at is None:
            return False
        outcome = evaluate(
            self._registry.rules, request.name, request.args, request.evaluated_at, "confirm"
        )
        return outcome.policy == "auto" and outcome.rule == request.rule

    def _check_quorum(self, registered: ParleyTool, request: RunToolInput) -> None:
        """A call this worker's own rules (evaluated when it was proposed) put under a
        quorum runs only with that many distinct approvers, the requester not counted."""
        if registered.policy != "confirm" or self._rule_made_auto(request):
            return
        at = request.proposed_at or datetime.now(UTC)
        outcome = evaluate(self._registry.rules, request.name, request.args, at, "confirm")
        approvers = set(request.approvals) - {request.user_id}
        if outcome.approvals > 1 and len(approvers) < outcome.approvals:
            raise ApplicationError(
                f"refused to run {request.name}: rule `{outcome.rule}` on this worker needs "
                f"{outcome.approvals} approvals by reviewers, and it has {len(approvers)}",
                type=ErrorType.TOOL_FAILED,
                non_retryable=True,
            )

    def _check_judge(self, request: RunToolInput) -> None:
        """A call approved by a judge (``judge:<model>``) runs only if this worker's own
        rules give that call to that judge, alone: no quorum, no reviewer, no ``deny``."""
        if not (request.approved_by or "").startswith("judge:"):
            return
        at = request.proposed_at or datetime.now(UTC)
        rule = next(
            (r for r in self._registry.rules if r.matches(request.name, request.args, at)), None
        )
        denied = any(
            r.decide == "deny" and r.matches(request.name, request.args, at)
            for r in self._registry.rules
        )
        if (
            rule is None
            or rule.judge is None
            or f"judge:{rule.judge_model}" != request.approved_by
            or rule.approvals > 1
            or rule.requires_reviewer
            or denied
        ):
            raise ApplicationError(
                f"refused to run {request.name}: {request.approved_by} may not approve it "
                "under this worker's rules",
                type=ErrorType.TOOL_FAILED,
                non_retryable=True,
            )

    def _tool(self, name: str, subagent: str | None) -> ParleyTool:
        """The registered tool, if this worker has it and the subagent (if any) may use
        it: the workflow's catalogue came from some worker; this one's word wins."""
        registered = self._registry.get(name)
        if registered is None:
            raise ApplicationError(
                f"tool {name!r} is not registered on this worker",
                type=ErrorType.TOOL_FAILED,
                non_retryable=True,
            )
        if subagent is not None:
            spec = self._registry.subagent(subagent)
            if spec is None or not spec.allows(name):
                raise ApplicationError(
                    f"refused to run {name}: subagent {subagent!r} may not use it on this worker",
                    type=ErrorType.TOOL_FAILED,
                    non_retryable=True,
                )
        return registered

    @activity.defn(name=CANONICAL_ARGS)
    async def canonical_args(self, request: CanonicalArgsInput) -> CanonicalArgsOutput:
        """An edit's arguments in the tool's canonical form, or a non-retryable
        ``ToolInputError`` saying why the tool cannot take them."""
        registered = self._tool(request.name, request.subagent)
        try:
            args = registered.canonical_args(request.args)
        except (ToolInputError, UnstableCanonicalForm) as err:
            raise ApplicationError(
                clipped(str(err)), type=ErrorType.TOOL_INPUT, non_retryable=True
            ) from None
        return CanonicalArgsOutput(args=args, args_hash=args_hash(args))

    def _check_canonical(self, registered: ParleyTool, request: RunToolInput) -> None:
        """Run only what was approved: canonical arguments, with the approved digest."""
        try:
            canonical = registered.canonical_args(request.args)
        except (ToolInputError, UnstableCanonicalForm) as err:
            canonical, problem = None, str(err)
        else:
            problem = "" if canonical == request.args else f"their canonical form is {canonical}"
        if not problem and request.args_hash is not None:
            digest = args_hash(request.args)
            if digest != request.args_hash:
                problem = f"they hash to {digest}, not to the approved {request.args_hash}"
        if problem:
            raise ApplicationError(
                clipped(
                    f"refused to run {request.name}: its arguments are not the ones approved "
                    f"({problem})"
                ),
                type=ErrorType.TOOL_FAILED,
                non_retryable=True,
            )

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, request: RunToolInput) -> RunToolOutput:
        registered = self._tool(request.name, request.subagent)
        if registered.policy == "deny" or (
            registered.policy == "confirm"
            and not request.approved_by
            and not self._rule_made_auto(request)
        ):
            # The workflow's catalogue came from some worker; this one's policy wins.
            raise ApplicationError(
                f"refused to run {request.name}: its policy on this worker is "
                f"{registered.policy!r} and no user decided on this call",
                type=ErrorType.TOOL_FAILED,
                non_retryable=True,
            )
        self._check_quorum(registered, request)
        self._check_judge(request)
        self._check_canonical(registered, request)
        args = dict(request.args)
        if registered.wants_context:
            args[CONTEXT_ARG] = tool_context(request)
        tool = registered.tool
        extra = {"tool_call_id": request.tool_call_id, "tool": request.name}
        activity.logger.info("running tool %s", request.name, extra=extra)
        session_id = activity.info().workflow_id.removeprefix(WORKFLOW_ID_PREFIX)
        with tracing.tool_span(request.name, request.tool_call_id, session_id) as span:
            async with heartbeating():
                try:
                    if tool.response_format == "content_and_artifact":
                        output: Any = await tool.ainvoke(
                            {
                                "type": "tool_call",
                                "id": request.tool_call_id,
                                "name": tool.name,
                                "args": args,
                            }
                        )
                    else:
                        output = await tool.ainvoke(args)
                except Exception as exc:
                    failure = tool_failure(exc)
                    activity.logger.warning(
                        "tool %s failed: %s: %s",
                        request.name,
                        failure.type,
                        failure.message,
                        extra=extra,
                    )
                    tracing.record_status(span, "error", failure.type)
                    raise failure from bounded_cause(exc)
                # From here on the tool has run: no failure may be left to Temporal's retry.
                try:
                    envelope = envelope_of(output)
                except Exception as exc:
                    envelope = _unstorable(f"{type(exc).__name__}: {exc}")
                activity.logger.info("tool %s ran: %s", request.name, envelope.status, extra=extra)
                error_type = envelope.error.type if envelope.error else None
                tracing.record_status(span, envelope.status, error_type)
                output = storable(RunToolOutput(result=envelope), self._max_result_bytes)
                return await self._kept_whole(output, extra)

    async def _kept_whole(self, output: RunToolOutput, extra: dict[str, str]) -> RunToolOutput:
        """``output`` with its result kept whole in the payload store when some reader
        sees it cut (``parley result``). The tool has run: a store that fails costs only
        the whole copy (logged), never a retry."""
        if self._results is None or not must_keep(output.result):
            return output
        info = activity.info()
        try:
            stored = await self._results.keep(
                output.result, workflow_id=info.workflow_id, namespace=info.namespace
            )
        except Exception as exc:
            activity.logger.warning("the whole result was not kept: %s", exc, extra=extra)
            return output
        return output.model_copy(update={"stored": stored})


def tool_context(request: RunToolInput) -> ToolContext:
    """Who the call acts for: the user and the call from the input, the conversation
    from this activity's own workflow id."""
    workflow_id = activity.info().workflow_id
    return ToolContext(
        user_id=request.user_id,
        session_id=workflow_id.removeprefix(WORKFLOW_ID_PREFIX),
        workflow_id=workflow_id,
        tool_call_id=request.tool_call_id,
    )


def storable(output: RunToolOutput, max_bytes: int) -> RunToolOutput:
    """``output`` made safe to hand back to Temporal (see the module docstring)."""
    converter = activity.payload_converter()
    try:
        size = converter.to_payloads([output])[0].ByteSize()
    except Exception:
        output = RunToolOutput(
            result=ToolResult.model_validate(
                _escape_surrogates(output.result.model_dump(mode="python"))
            )
        )
        try:
            size = converter.to_payloads([output])[0].ByteSize()
        except Exception as exc:
            return RunToolOutput(result=_unstorable(f"{type(exc).__name__}: {exc}"))
    if size <= max_bytes:
        return output
    content = output.result.content
    message = (
        f"the tool ran, but its result is {size:,} bytes, over this worker's limit of "
        f"{max_bytes:,} (PARLEY_MAX_TOOL_RESULT_BYTES); it was not run again"
    )
    return RunToolOutput(
        result=ToolResult(
            status="error",
            content=f"Error: {message}. The result begins:\n" + content[:MODEL_RESULT_MAX_CHARS],
            error=ToolErrorInfo(type=ErrorType.RESULT_TOO_LARGE, message=message),
        )
    )


def _unstorable(reason: str) -> ToolResult:
    message = f"the tool ran, but its result could not be stored ({reason}); it was not run again"
    return ToolResult(
        status="error",
        content=f"Error: {message}.",
        error=ToolErrorInfo(type=ErrorType.RESULT_UNSTORABLE, message=message),
    )


def _escape_surrogates(value: Any) -> Any:
    """Every string in ``value`` with lone surrogates written as ``\\udcXX``."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escape_surrogates(k): _escape_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escape_surrogates(v) for v in value]
    return value


def envelope_of(output: Any) -> ToolResult:
    """The envelope for what a tool returned; a failure it reports is an error (F4)."""
    if isinstance(output, ToolResult):
        return output
    if isinstance(output, ToolMessage):
        status = "error" if output.status == "error" else "success"
        content = output.content if isinstance(output.content, str) else json.dumps(output.content)
        return ToolResult(status=status, content=content, payload=output.artifact)
    if isinstance(output, pydantic.BaseModel):
        output = output.model_dump(mode="json")
    if isinstance(output, str):
        return ToolResult(status="success", content=output)
    content = json.dumps(output, ensure_ascii=False, default=str)
    if isinstance(output, dict) and (output.get("success") is False or output.get("ok") is False):
        message = str(output.get("message") or output.get("error") or "the tool reported failure")
        return ToolResult(
            status="error",
            content=f"Error: {message}",
            payload=output,
            error=ToolErrorInfo(type=ErrorType.TOOL_REPORTED_FAILURE, message=message),
        )
    return ToolResult(status="success", content=content, payload=output)


def tool_failure(exc: BaseException) -> ApplicationError:
    """The one mapping from what a tool raised to the retry contract and the model."""
    http_status = getattr(exc, "http_status", None)
    body = redact(getattr(exc, "body", None))

    def failure(error_type: str, message: str, **kwargs: Any) -> ApplicationError:
        message = clipped(redact(message))
        info = ToolErrorInfo(type=error_type, message=message, http_status=http_status, body=body)
        return ApplicationError(message, info.model_dump(mode="json"), type=error_type, **kwargs)

    if isinstance(exc, ToolInputError | ToolException | pydantic.ValidationError):
        return failure(ErrorType.TOOL_INPUT, _message(exc), non_retryable=True)
    if isinstance(exc, ToolPermissionError | PermissionError):
        return failure(ErrorType.TOOL_PERMISSION, _message(exc), non_retryable=True)
    if isinstance(exc, TransientError):
        delay = retry_delay(exc.retry_after, TOOL_ACTIVITY)
        return failure(ErrorType.TOOL_TRANSIENT, exc.message, next_retry_delay=delay)
    if isinstance(exc, TimeoutError | ConnectionError | httpx.TransportError):
        return failure(ErrorType.TOOL_TRANSIENT, f"{type(exc).__name__}: {exc}")
    # ValueError, TypeError, RuntimeError...: a programming error. Fail closed.
    return failure(ErrorType.TOOL_FAILED, f"{type(exc).__name__}: {exc}", non_retryable=True)


class ToolRaised(Exception):
    """What a tool raised, as a failure's cause: its type and message (redacted, cut)."""


def bounded_cause(exc: BaseException) -> BaseException:
    """``exc`` as the cause a failure carries into history (as is: no store): its type,
    message and traceback, the message redacted and cut to ``FAILURE_MESSAGE_MAX_CHARS``."""
    cause = ToolRaised(clipped(redact(f"{type(exc).__name__}: {exc}")))
    return cause.with_traceback(exc.__traceback__)


def _message(exc: BaseException) -> str:
    if isinstance(exc, pydantic.ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__
