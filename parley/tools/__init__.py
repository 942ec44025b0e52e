"""Tools and their policies, and the worker's tool registry. Activity side.

A Parley tool is a LangChain ``BaseTool`` plus a policy:

- ``auto``: runs as soon as the model asks;
- ``confirm``: waits for the user's decision (the default for a bare tool);
- ``deny``: never runs; the model is told so.

and optionally a preview (what a call would change, computed before the decision) and
an inverse (the call that undoes one that ran): ``confirm(tool, preview=...,
compensate=...)``. The declaration API is ``parley.tools.declarations``, re-exported here.

A toolset is a list of tools (``ParleyTool`` or bare ``BaseTool``), or a factory
returning one: a callable taking nothing, or the one narrow config it declares
(``parley.tools.loading.factory``), never the worker's Settings. The worker loads toolsets
from ``PARLEY_TOOLS=module:attr[,...]``.

A tool that needs to know whom it acts for declares an injected argument
``context: Annotated[ToolContext, InjectedToolArg]``; the model never sees it, and
``run_tool`` fills it with the conversation's user id, session and idempotency key.

Canonical once: :meth:`ParleyTool.canonical_args` validates a call's arguments against
the tool's schema and puts them in the tool's canonical form (its ``prepare``, applied
until it changes nothing more) when the call is proposed or edited. The policy rules,
remembered decisions, the approval card, the audit log and the tool itself all see
exactly those arguments; ``run_tool`` refuses arguments that are not canonical.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool

from parley.config.settings import Settings
from parley.contracts import (
    SUBAGENT_ARGS_SCHEMA,
    InverseCall,
    PolicyRule,
    SpendBudget,
    SubagentSpec,
    ToolCatalogue,
    ToolContext,
    ToolPreview,
)
from parley.contracts.grants import GrantLimits
from parley.tools.declarations import (
    CANONICAL_ROUNDS,
    CONFUSABLE_SCRIPTS,
    CONTEXT_ARG,
    POLICIES,
    PREVIEW_TIMEOUT_SECONDS,
    SERVER_METADATA,
    ArgsPreparer,
    Compensator,
    ParleyTool,
    Previewer,
    UnstableCanonicalForm,
    auto,
    confirm,
    deny,
    identifier,
    one_script,
)
from parley.tools.instructions import AgentSetup, load_agent
from parley.tools.loading import TOOLSET_CONFIGS, FactoryInputs, call_factory
from parley.tools.mcp_previews import with_previews
from parley.tools.policies import load_policies

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CANONICAL_ROUNDS",
    "CONFUSABLE_SCRIPTS",
    "CONTEXT_ARG",
    "MAX_TOOLS",
    "POLICIES",
    "PREVIEW_TIMEOUT_SECONDS",
    "SERVER_METADATA",
    "TOOLSET_SHAPE",
    "ArgsPreparer",
    "Compensator",
    "ParleyTool",
    "Previewer",
    "ToolRegistry",
    "UnstableCanonicalForm",
    "auto",
    "confirm",
    "deny",
    "identifier",
    "load_registry",
    "load_toolset",
    "one_script",
]


class ToolRegistry:
    """The tools this worker can run, by name, its policy rules
    (``parley.contracts.policies``; the first rule that matches a call decides) and its
    subagents (the workflow runs those as child conversations, never ``run_tool``)."""

    def __init__(
        self,
        tools: Iterable[ParleyTool | BaseTool],
        rules: Iterable[PolicyRule] = (),
        subagents: Iterable[SubagentSpec] = (),
    ) -> None:
        self.rules: list[PolicyRule] = list(rules)
        self.subagents: list[SubagentSpec] = list(subagents)
        #: The policy file's ``[budget]`` (None: model use never waits for a decision).
        self.spend: SpendBudget | None = None
        #: The policy file's ``[grants]`` (None: a remembered decision lasts the whole
        #: conversation unless it says otherwise).
        self.grants: GrantLimits | None = None
        #: The agent's instructions (``parley.tools.instructions``): none unless loaded.
        self.agent = AgentSetup()
        self._tools: dict[str, ParleyTool] = {}
        for item in tools:
            tool = item if isinstance(item, ParleyTool) else ParleyTool(item)
            if not isinstance(tool.tool, BaseTool):
                raise TypeError(f"{tool.tool!r} is not a langchain-core BaseTool")
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    def get(self, name: str) -> ParleyTool | None:
        return self._tools.get(name)

    def subagent(self, name: str) -> SubagentSpec | None:
        return next((s for s in self.subagents if s.name == name), None)

    async def preview(
        self, name: str, args: dict[str, Any], context: ToolContext
    ) -> ToolPreview | None:
        """Tool ``name``'s preview of a call with ``args`` (canonical): what it would
        change, or a failed preview saying why not (never an exception); None if this
        worker has no such tool or the tool declares no preview."""
        tool = self._tools.get(name)
        return None if tool is None else await tool.previewed(args, context)

    def inverse(self, name: str, args: dict[str, Any], payload: Any) -> InverseCall | None:
        """The call that undoes a run of ``name`` with ``args`` that returned
        ``payload``, its arguments in its tool's canonical form; None if the tool
        declares no inverse or that run changed nothing. A declaration that names a tool
        this worker lacks, or arguments that tool refuses, raise (a bug in the toolset:
        ``ValueError``, ``ToolInputError``)."""
        tool = self._tools.get(name)
        if tool is None or tool.compensate is None:
            return None
        call = tool.compensate(dict(args), payload)
        if call is None:
            return None
        inverse = self._tools.get(call.name)
        if inverse is None:
            raise ValueError(
                f"tool {name!r} declares its inverse as {call.name!r}, which is not "
                "registered on this worker"
            )
        return InverseCall(name=call.name, args=inverse.canonical_args(call.args))

    def langchain_tools(self, subagent: SubagentSpec | None = None) -> list[BaseTool]:
        """The tools to bind to the chat model (deny-policy ones included: the model
        may ask, and is then told it may not), with one tool per subagent; for a
        subagent's conversation, only the tools it may use."""
        if subagent is not None:
            return [t.tool for t in self._tools.values() if subagent.allows(t.name)]
        return [t.tool for t in self._tools.values()] + [_subagent_tool(s) for s in self.subagents]

    def catalogue(self, *, notifications: bool = False) -> ToolCatalogue:
        """The tools as the workflow sees them, with a version digest of their specs
        (and of whether the worker notifies a webhook)."""
        specs = [t.spec() for t in self._tools.values()] + [s.spec() for s in self.subagents]
        described = [_described(s.model_dump(mode="json")) for s in specs]
        if notifications:
            described.append({"notifications": True})
        described += [{"rule": r.described()} for r in self.rules]
        described += [{"subagent": s.model_dump(mode="json")} for s in self.subagents]
        if self.spend is not None:
            described.append({"spend": self.spend.model_dump(mode="json")})
        if self.grants is not None:
            described.append({"grants": self.grants.model_dump(mode="json")})
        digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
        return ToolCatalogue(
            tools=specs,
            version=digest,
            notifications=notifications,
            rules=self.rules,
            subagents=self.subagents,
            spend=self.spend,
            grants=self.grants,
        )

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def tools(self) -> list[ParleyTool]:
        return list(self._tools.values())


#: ``ToolSpec`` flags the catalogue's digest leaves out while False.
UNDECLARED_FLAGS = ("has_preview", "has_inverse")


def _described(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec as the catalogue's digest reads it: without a preview or an inverse
    flag that is False, nor a ``server`` that is None (a built-in tool), so a catalogue
    digests as it did before they existed."""
    return {
        k: v
        for k, v in spec.items()
        if not (k in UNDECLARED_FLAGS and v is False) and not (k == "server" and v is None)
    }


def _subagent_tool(spec: SubagentSpec) -> BaseTool:
    """A subagent as the model sees it. The workflow starts the subagent's conversation
    itself; nothing ever runs this tool."""

    def not_run(task: str) -> str:
        raise RuntimeError(f"{spec.name} is a subagent: its conversation runs it")

    return StructuredTool.from_function(
        func=not_run, name=spec.name, description=spec.description, args_schema=SUBAGENT_ARGS_SCHEMA
    )


def load_toolset(
    reference: str, inputs: FactoryInputs | None = None
) -> list[ParleyTool | BaseTool]:
    """Import ``module:attr``; the attribute is a toolset, or a factory returning one
    that takes nothing or the one config it declares (``parley.tools.loading.factory``),
    taken from ``inputs`` (narrow configs the entry point made from its Settings, its
    HTTP client and, for a ``ToolsetContext``, its environment's variables under the
    factory's prefix). No factory gets the Settings, and none is inspected."""
    module_name, sep, attr = reference.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"toolset {reference!r} is not of the form module:attr")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"toolset {reference!r}: cannot import {module_name}: {err}") from err
    try:
        value: Any = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"toolset {reference!r}: {module_name} has no {attr!r}") from None
    if callable(value) and not isinstance(value, BaseTool):
        value = call_factory(
            value,
            inputs or FactoryInputs(),
            what=f"toolset {reference!r}",
            allowed=TOOLSET_CONFIGS,
            refused=f"{attr} needs arguments; {TOOLSET_SHAPE}",
        )
    if isinstance(value, ParleyTool | BaseTool):
        return [value]
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | Iterator):
        raise ValueError(
            f"toolset {reference!r} is a {type(value).__name__}, not a toolset; {TOOLSET_SHAPE}"
        )
    tools = list(itertools.islice(value, MAX_TOOLS + 1))  # an endless iterator must not hang
    if len(tools) > MAX_TOOLS:
        raise ValueError(
            f"toolset {reference!r} yields more than {MAX_TOOLS} tools; {TOOLSET_SHAPE}"
        )
    for item in tools:
        if not isinstance(item, ParleyTool | BaseTool):
            raise ValueError(
                f"toolset {reference!r} holds a {type(item).__name__}, not a tool; {TOOLSET_SHAPE}"
            )
    return tools


#: More tools than any model can choose from: a toolset past this is a mistake.
MAX_TOOLS = 1_000

TOOLSET_SHAPE = (
    "a toolset is a list of tools (ParleyTool or langchain-core BaseTool) "
    "or a factory returning one: f(), or f(config) marked @factory(Config) "
    "(parley.tools.loading), never f(settings)"
)


def load_registry(
    spec: str,
    extra: Iterable[ParleyTool | BaseTool] = (),
    settings: Settings | None = None,
    http_client: httpx.AsyncClient | None = None,
    environ: Mapping[str, str] | None = None,
) -> ToolRegistry:
    """The registry for ``PARLEY_TOOLS`` (comma-separated ``module:attr`` references),
    with ``PARLEY_POLICIES`` from ``settings``; each factory gets its own narrow config
    made from them (:meth:`FactoryInputs.from_settings`), never ``settings``."""
    inputs = FactoryInputs.from_settings(settings, http_client, environ)
    tools: list[ParleyTool | BaseTool] = []
    for reference in filter(None, (part.strip() for part in spec.split(","))):
        tools.extend(load_toolset(reference, inputs))
    tools.extend(extra)
    registry = ToolRegistry(tools)
    table = None
    if settings is not None and settings.policies_file:
        policies = load_policies(settings.policies_file, tools=[t.spec() for t in registry.tools()])
        if policies.previews:  # MCP tools' previews (parley.tools.mcp_previews)
            named = with_previews(registry.tools(), policies.previews, settings.policies_file)
            registry = ToolRegistry(named)
        registry.rules, registry.subagents = policies.rules, policies.subagents
        registry.spend, table = policies.budget, policies.agent
        registry.grants = policies.grants
    registry.agent = load_agent(environ or {}, table, settings.policies_file if settings else None)
    return registry
