"""Tool contracts: what the workflow knows of a tool (its spec and the catalogue),
what a tool receives (its context) and the one result envelope."""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Any

import jsonschema
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
)

from parley.contracts.grants import GrantLimits
from parley.contracts.judging import JudgeVerdict
from parley.contracts.names import ResultStatus, ToolPolicy
from parley.contracts.payloads import Contract, _ContentOfPayload
from parley.contracts.policies import PolicyRule, SpendBudget


class ToolSpec(Contract):
    """What the workflow knows of a tool: enough to validate args and apply its policy."""

    name: str
    description: str
    policy: ToolPolicy
    args_schema: dict[str, Any]
    #: Whether arguments the schema does not name are accepted. Off unless the tool's
    #: schema says ``additionalProperties``: an edit cannot smuggle in ``"force": true``.
    extra_args_allowed: bool = False
    #: Whether the tool declares a preview (``parley.contracts.previews``: what a call
    #: would change, computed before the decision) and an inverse (the call that undoes
    #: one that ran). False by default, so an old catalogue reads as before; left out of
    #: the catalogue's digest while False (``ToolRegistry.catalogue``), so a worker whose
    #: tools declare neither keeps its catalogue version.
    has_preview: bool = False
    has_inverse: bool = False
    #: The MCP server that serves the tool, as ``name@version`` (its ``initialize``
    #: answer's ``serverInfo``); None for a built-in tool, and then left out of the
    #: catalogue's digest. A remembered decision is for this version (``grants``).
    server: str | None = None
    _validator: Any = PrivateAttr(default=None)

    def args_error(self, args: dict[str, Any]) -> str | None:
        """Why ``args`` do not fit this tool's schema, or None when they do. Arguments
        the schema does not name are refused unless the tool opts in."""
        if self._validator is None:  # compiled once per spec: every proposal asks
            schema = self.args_schema
            if not self.extra_args_allowed:
                schema = {**schema, "additionalProperties": False}
            self._validator = jsonschema.Draft202012Validator(schema)
        errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.path))
        if not errors:
            return None
        return "; ".join(
            (f"{'.'.join(map(str, e.path))}: " if e.path else "") + e.message for e in errors
        )


#: The arguments of a subagent, as its tool in the catalogue: one task, in full.
SUBAGENT_ARGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "description": "The whole task, with everything the subagent needs to know: "
            "it sees nothing else of this conversation.",
        }
    },
    "required": ["task"],
}


class SubagentSpec(Contract):
    """A subagent the model may hand a task to (the policy file's ``[[subagent]]``): a
    child conversation that may use only the tools its ``tools`` patterns name, behind
    the same gate. Its confirm calls wait on the parent conversation's pending list."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(min_length=1)
    #: Shell-style patterns (``fnmatch``) of the tools it may use; never a subagent.
    tools: list[str] = Field(min_length=1)
    #: A system message the subagent's conversation starts with.
    instructions: str = ""

    def allows(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.tools)

    def spec(self) -> ToolSpec:
        """How the model sees it: a tool that takes a task (``auto`` unless a rule says
        otherwise; the subagent's own calls are gated one by one)."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            policy="auto",
            args_schema=SUBAGENT_ARGS_SCHEMA,
        )


class ToolCatalogue(Contract):
    tools: list[ToolSpec]
    #: A digest of ``tools``, set by the worker: the workflow asks for the catalogue
    #: again only when the worker's version differs.
    version: str = ""
    #: Whether the worker has a webhook to tell when calls wait for a decision
    #: (``PARLEY_NOTIFY_URL``): the workflow runs ``notify`` only then.
    notifications: bool = False
    #: The worker's policy rules (``PARLEY_POLICIES``), first match wins.
    rules: list[PolicyRule] = Field(default_factory=list)
    #: The worker's subagents; each is also in ``tools``, as the tool that starts it.
    subagents: list[SubagentSpec] = Field(default_factory=list)
    #: The policy file's ``[budget]``: when a conversation's model use waits for a decision.
    spend: SpendBudget | None = None
    #: The policy file's ``[grants]``: how long a remembered decision lasts.
    grants: GrantLimits | None = None

    def get(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def subagent(self, name: str) -> SubagentSpec | None:
        return next((s for s in self.subagents if s.name == name), None)

    def for_subagent(self, name: str) -> ToolCatalogue:
        """What subagent ``name`` sees: the tools it may use (no subagents), the same
        rules. Nothing, if this catalogue has no such subagent."""
        spec = self.subagent(name)
        subagents = {s.name for s in self.subagents}
        tools = [t for t in self.tools if spec and t.name not in subagents and spec.allows(t.name)]
        return self.model_copy(update={"tools": tools, "subagents": []})


class ToolContext(Contract):
    """Who a tool acts for, given to tools that declare ``context: InjectedToolArg``."""

    user_id: str
    session_id: str
    workflow_id: str
    tool_call_id: str

    @property
    def idempotency_key(self) -> str:
        """Stable across activity retries, so a retried write never happens twice."""
        return f"{self.workflow_id}:{self.tool_call_id}"


class ToolErrorInfo(BaseModel):
    """Part of the envelope: its four keys are always there, even in a payload."""

    type: str
    message: str
    http_status: int | None = None
    body: Any = None


class ToolResult(_ContentOfPayload):
    """The one envelope of a tool result: for the model, the events and the audit log.
    What clients read (events, ``--json``) always has its four keys."""

    status: ResultStatus
    content: str
    payload: Any = None
    error: ToolErrorInfo | None = None


class CanonicalArgsInput(Contract):
    """``canonical_args``: a call's arguments as someone proposed them (an edit)."""

    name: str
    args: dict[str, Any]
    #: Set in a subagent's conversation: only the tools that subagent may use.
    subagent: str | None = None


class CanonicalArgsOutput(Contract):
    """The arguments in the tool's canonical form, and their digest (``args_hash``).
    Arguments that do not fit the tool are a non-retryable ``ToolInputError`` instead."""

    args: dict[str, Any]
    args_hash: str


class RunToolInput(Contract):
    """One tool call. The activity builds the tool's :class:`ToolContext` from these
    and its own workflow id, so the conversation's ids are not repeated in every input."""

    name: str
    #: The canonical arguments (put in the tool's canonical form when proposed, or
    #: edited): the worker runs exactly these.
    args: dict[str, Any]
    #: Their digest as approved (``args_hash``): the worker refuses arguments that do
    #: not hash to it, or that are not in the tool's canonical form.
    args_hash: str | None = None
    tool_call_id: str
    user_id: str
    #: Who approved (or edited) this call; set only by a ``decide``, or by a decision
    #: the user asked to remember. The worker refuses a ``confirm`` tool without it,
    #: whatever the workflow's catalogue said, unless ``rule`` made it ``auto``.
    approved_by: str | None = None
    #: A quorum call's approvers (distinct reviewers), and the instant it was proposed:
    #: the worker evaluates its own rules at that instant and refuses fewer approvers
    #: than the matching rule's ``approvals``.
    approvals: list[str] = Field(default_factory=list)
    proposed_at: datetime | None = None
    #: The policy rule that made this call ``auto``, and the instant it was evaluated
    #: at: the worker evaluates its own rules again with the same inputs.
    rule: str | None = None
    evaluated_at: datetime | None = None
    #: Set when a subagent's conversation asks: the worker runs only the tools that
    #: subagent may use, whatever the workflow's catalogue said.
    subagent: str | None = None


class StoredResult(Contract):
    """Where a result the model and the previews saw cut is kept whole: an object of the
    payload store (``parley.storage.results``), stored under the conversation's workflow
    id (so retention keeps it as long as the transcript). ``parley result`` and
    ``GET /v1/conversations/{id}/results/{call_id}`` read it back."""

    claim: dict[str, str]
    #: The whole content's length in characters, and the whole envelope's JSON size.
    content_chars: int = 0
    bytes: int = 0


class RunToolOutput(Contract):
    """A successful run; a failure is raised as an ``ApplicationError`` instead.
    ``stored``: set when the result is longer than any preview of it (the model's
    ``MODEL_RESULT_MAX_CHARS``, a payload over ``PAYLOAD_PREVIEW_BYTES``) and the worker
    kept it whole in the payload store."""

    result: ToolResult
    stored: StoredResult | None = None


class TurnToolResult(_ContentOfPayload):
    """A tool result as a turn reports it: the envelope, with content cut to
    ``PREVIEW_CHARS`` and a payload over ``PAYLOAD_PREVIEW_BYTES`` left out (both say
    so), so that an update result stays small whatever the tool returned."""

    tool_call_id: str
    name: str
    status: ResultStatus
    content: str
    payload: Any = None
    error: ToolErrorInfo | None = None
    #: The length of the whole content, when ``content`` is a preview.
    content_chars: int | None = None
    #: The size of the payload (JSON bytes), when it was left out.
    payload_omitted_bytes: int | None = None
    #: The verdict of the call's judge (its rule's ``judge``), when one decided it.
    judged: JudgeVerdict | None = None
