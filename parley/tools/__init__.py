"""Tools and their policies, and the worker's tool registry. Activity side.

A Parley tool is a LangChain ``BaseTool`` plus a policy:

- ``auto``: runs as soon as the model asks;
- ``confirm``: waits for the user's decision (the default for a bare tool);
- ``deny``: never runs; the model is told so.

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
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic
from langchain_core.tools import BaseTool, StructuredTool

from parley.config.settings import Settings
from parley.contracts import (
    SUBAGENT_ARGS_SCHEMA,
    PolicyRule,
    SpendBudget,
    SubagentSpec,
    ToolCatalogue,
    ToolPolicy,
    ToolSpec,
)
from parley.contracts.errors import ToolInputError
from parley.tools.instructions import AgentSetup, load_agent
from parley.tools.loading import TOOLSET_CONFIGS, FactoryInputs, call_factory
from parley.tools.policies import load_policies

if TYPE_CHECKING:
    import httpx

CONTEXT_ARG = "context"
POLICIES: tuple[ToolPolicy, ...] = ("auto", "confirm", "deny")


ArgsPreparer = Callable[[dict[str, Any]], dict[str, Any]]

#: How many times ``prepare`` may change its own output before the form counts as
#: unstable (a bug in the tool: the call is refused, never run in some other form).
CANONICAL_ROUNDS = 4


class UnstableCanonicalForm(ValueError):
    """A tool's ``prepare`` keeps changing its own output: no form is canonical."""


@dataclass(frozen=True)
class ParleyTool:
    """A tool, its policy, and optionally ``prepare``: a pure function that puts
    validated arguments in the tool's canonical form (e.g. a whole sentence given as a
    title becomes the title it names; a branch name loses its whitespace and its
    ``refs/heads/``). It runs when a call is proposed or edited, before any rule or
    person sees the arguments, so the user approves exactly what will run. The tool
    body may normalize again only idempotently: ``canonical_args`` checks that
    ``prepare`` settles, and ``run_tool`` that what it runs is canonical."""

    tool: BaseTool
    policy: ToolPolicy = "confirm"
    prepare: ArgsPreparer | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"tool {self.tool.name!r}: policy {self.policy!r} is not one of {POLICIES}"
            )

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def wants_context(self) -> bool:
        if isinstance(self.tool.args_schema, dict):
            return False  # a JSON-schema tool (MCP): no injected arguments
        injected = set(self.tool.get_input_schema().model_fields) - set(
            self.tool.tool_call_schema.model_fields
        )
        return CONTEXT_ARG in injected

    def canonical_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` in this tool's canonical form (see the class docstring). Raises
        ``ToolInputError`` for arguments the tool cannot take, saying why, and
        :class:`UnstableCanonicalForm` if ``prepare`` never settles."""
        current = self._validated(args)
        for _ in range(CANONICAL_ROUNDS):
            if self.prepare is None:
                return current
            try:
                prepared = self._validated(self.prepare(dict(current)))
            except ToolInputError:
                raise
            except (ValueError, TypeError) as err:
                raise ToolInputError(f"invalid arguments for {self.name}: {err}") from err
            if prepared == current:
                return current
            current = prepared
        raise UnstableCanonicalForm(
            f"tool {self.name}: prepare() still changed its own output after "
            f"{CANONICAL_ROUNDS} rounds ({args!r} -> {current!r}); a canonical form must "
            "be a fixed point"
        )

    def _validated(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments the tool's schema accepts, as it reads them (pydantic coercion
        and validators); keys it does not name are refused unless it opts in."""
        if not isinstance(args, dict):
            raise ToolInputError(f"the arguments of {self.name} must be a JSON object")
        problem = self.spec().args_error(args)
        if problem:
            raise ToolInputError(f"invalid arguments for {self.name}: {problem}")
        schema = self.tool.tool_call_schema
        if isinstance(schema, dict):
            return dict(args)  # a JSON-schema tool (MCP): the schema check is all
        try:
            model = schema.model_validate(args)
        except pydantic.ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()
            )
            raise ToolInputError(f"invalid arguments for {self.name}: {problems}") from None
        return model.model_dump(mode="json", exclude_unset=True)

    def spec(self) -> ToolSpec:
        """What the workflow knows of this tool; built once (every proposal and every
        run checks arguments against it)."""
        cached = self.__dict__.get("_spec")
        if cached is None:
            cached = self._build_spec()
            object.__setattr__(self, "_spec", cached)  # a frozen dataclass, built lazily
        return cached

    def _build_spec(self) -> ToolSpec:
        call_schema = self.tool.tool_call_schema
        schema = _without_labels(
            call_schema if isinstance(call_schema, dict) else call_schema.model_json_schema()
        )
        if schema.get("description") == self.tool.description:
            del schema["description"]  # the spec says it once
        return ToolSpec(
            name=self.tool.name,
            description=self.tool.description,
            policy=self.policy,
            args_schema=schema,
            # A tool opts into extra arguments through its schema (pydantic
            # ``extra="allow"`` gives ``additionalProperties: true``).
            extra_args_allowed=schema.get("additionalProperties") not in (None, False),
        )


#: Keywords whose value maps names (of properties, definitions) to schemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

#: Keywords whose value is data (a default, an example), not a schema.
_SCHEMA_VALUES = ("default", "const", "enum", "examples")


def _without_labels(schema: Any) -> Any:
    """A JSON schema without pydantic's ``title`` labels ("Title" for ``title``): they
    validate nothing and the catalogue is workflow history. A property *named* title
    stays."""
    if isinstance(schema, list):
        return [_without_labels(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    slim: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_VALUES:
            slim[key] = value  # data, not schema: kept as written
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            slim[key] = {name: _without_labels(sub) for name, sub in value.items()}
        else:
            slim[key] = _without_labels(value)
    return slim


def auto(tool: BaseTool) -> ParleyTool:
    return ParleyTool(tool, "auto")


def confirm(tool: BaseTool) -> ParleyTool:
    return ParleyTool(tool, "confirm")


def deny(tool: BaseTool) -> ParleyTool:
    return ParleyTool(tool, "deny")


def identifier(value: str) -> str:
    """An identifier-like argument (a project, an alias, a branch) in canonical text:
    Unicode NFKC (full-width and compatibility forms become their plain letters) and no
    surrounding whitespace, in one script per word (:func:`one_script`). Idempotent."""
    return one_script(unicodedata.normalize("NFKC", value).strip())


#: Scripts whose letters look alike: a word may use one of them, not several.
CONFUSABLE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK"})


def one_script(value: str) -> str:
    """``value``, unless a word of it mixes Latin, Cyrillic and Greek letters (``sеcret``
    with a Cyrillic ``е`` looks like ``secret`` to a person and to no rule), which is
    refused the way browsers refuse such host names. Other scripts mix freely."""
    for word in _WORDS.findall(value):
        scripts = {unicodedata.name(c, "?").split(" ")[0] for c in word if c.isalpha()}
        mixed = sorted(scripts & CONFUSABLE_SCRIPTS)
        if len(mixed) > 1:
            raise ToolInputError(
                f"{value!r} mixes {' and '.join(s.title() for s in mixed)} letters in "
                f"{word!r}; write each word in one script"
            )
    return value


_WORDS = re.compile(r"\w+")


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
        described = [s.model_dump(mode="json") for s in specs]
        if notifications:
            described.append({"notifications": True})
        described += [{"rule": r.model_dump(mode="json")} for r in self.rules]
        described += [{"subagent": s.model_dump(mode="json")} for s in self.subagents]
        if self.spend is not None:
            described.append({"spend": self.spend.model_dump(mode="json")})
        digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
        return ToolCatalogue(
            tools=specs,
            version=digest,
            notifications=notifications,
            rules=self.rules,
            subagents=self.subagents,
            spend=self.spend,
        )

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def tools(self) -> list[ParleyTool]:
        return list(self._tools.values())


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
        registry.rules, registry.subagents = policies.rules, policies.subagents
        registry.spend, table = policies.budget, policies.agent
    registry.agent = load_agent(environ or {}, table, settings.policies_file if settings else None)
    return registry
