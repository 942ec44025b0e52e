"""The policy file (``PARLEY_POLICIES``): approval rules and subagents as data. Worker
side.

TOML. One ``[[rule]]`` table per rule, tried in order; the first that matches a call
decides (``parley.contracts.policies`` says what "matches" means)::

    [[rule]]
    name = "push-feature-branches"
    tool = "git_push_branch"
    args = { branch = "feat/*" }
    decide = "auto"

    [[rule]]
    name = "push-protected"
    tool = "git_push_branch"
    decide = "confirm"

    [[rule]]
    name = "plans-after-hours"
    tool = "create_plan"
    hours = "09:00-18:00"
    days = "mon-fri"
    utc_offset = "+01:00"
    outside = true
    decide = "deny"

A ``confirm`` rule may name a judge, asked before a person (``judge_model`` must load,
as ``PARLEY_MODEL`` would; ``parley.activities.judging``)::

    [[rule]]
    name = "plans-judged"
    tool = "create_plan"
    decide = "confirm"
    judge = "model"
    judge_model = "openai:gpt-4o-mini"
    judge_instructions = "approve plans for this quarter"
    on_doubt = "escalate"
    escalate_to = "priya"

One ``[[subagent]]`` table per subagent (``parley.contracts.SubagentSpec``): the model
sees it as a tool that takes a task; the task runs as a child conversation that may use
only the tools ``tools`` names, behind the same rules and gate::

    [[subagent]]
    name = "planner"
    description = "Works out and records plans; it cannot touch git."
    tools = ["list_plans", "get_plan", "create_plan"]
    instructions = "You plan work. Record each plan with create_plan."

One ``[agent]`` table may give the agent's own instructions (``parley.tools.instructions``):
its ``name``, and its ``instructions`` or an ``instructions_file`` (beside the policy
file)::

    [agent]
    name = "release-helper"
    instructions_file = "release-helper.md"

One ``[budget]`` table may set a spending mark: once a conversation's model calls have
used that many tokens in all, its next model call waits for a decision (approve raises
the mark by the same step, reject ends the turn)::

    [budget]
    confirm_over_tokens = 200000

One ``[grants]`` table may bound remembered decisions (``parley.contracts.grants``):
how long one lasts when its decision names no ``remember_seconds``, and the longest
any may last::

    [grants]
    remember_seconds = 86400
    max_remember_seconds = 604800

One ``[[preview]]`` table per MCP tool given a preview (``parley.tools.mcp_previews``):
its preview is the answer of ``with``, a read-only tool of the same server, called with
the call's arguments that tool declares::

    [[preview]]
    tool = "erase_notes"
    with = "find_notes"

The file is read strictly, so that it never fails open: a key no table takes (with
the nearest known one), a value of the wrong type (``"true"`` for ``true``, ``2.0`` for
``2``: TOML has types, nothing is coerced), a ``tool`` that names no tool of the worker,
an ``args`` name the tool does not take, a pattern no value the tool takes can match,
or a rule that an earlier one matches whenever it would (it never decides) stops the
worker, and ``parley tools``, with one line naming the file, the table and the
mistake. The file is never half applied.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parley.contracts import PolicyRule, SpendBudget, SubagentSpec, ToolSpec
from parley.contracts.grants import GrantLimits
from parley.contracts.policies import pattern_fits
from parley.tools.loading import read_config_file

M = TypeVar("M", bound=BaseModel)

#: The file's tables, as they are written.
TABLES = {
    "rule": "[[rule]]",
    "subagent": "[[subagent]]",
    "budget": "[budget]",
    "grants": "[grants]",
    "agent": "[agent]",
    "preview": "[[preview]]",
}

#: How many tool names a message lists at most.
LISTED = 12


class PolicyFileError(ValueError):
    """A mistake in the policy file: one line naming the file, the table and what is
    wrong with it."""

    def __init__(self, file: Path, where: str, problem: str) -> None:
        super().__init__(f"PARLEY_POLICIES: {file}: {where}{': ' if where else ''}{problem}")


@dataclass(frozen=True)
class Policies:
    """What a policy file holds."""

    rules: list[PolicyRule] = field(default_factory=list)
    subagents: list[SubagentSpec] = field(default_factory=list)
    budget: SpendBudget | None = None
    agent: AgentTable | None = None
    grants: GrantLimits | None = None
    previews: list[PreviewTable] = field(default_factory=list)


class PreviewTable(BaseModel):
    """A ``[[preview]]`` table: MCP tool ``tool``'s preview is the answer of ``with``
    (``reader``), a read-only tool of the same server. The names are checked against
    the worker's tools by ``parley.tools.mcp_previews``."""

    model_config = ConfigDict(frozen=True)

    tool: str
    reader: str = Field(alias="with")


class AgentTable(BaseModel):
    """The ``[agent]`` table: the agent's name and instructions (the text, or a file
    beside the policy file; ``parley.tools.instructions`` reads it)."""

    name: str = ""
    instructions: str | None = None
    instructions_file: str | None = None


def load_policies(
    path: str | Path,
    *,
    tool_names: list[str] | None = None,
    tools: Sequence[ToolSpec] | None = None,
) -> Policies:
    """The file's rules, subagents and budget. Checked against the worker's tools when
    ``tools`` (their specs: names and argument schemas) or only ``tool_names`` is given:
    a pattern that matches no tool is a mistake, and with ``tools`` so is an argument a
    rule names that its tools do not take, or a pattern no value of it can match."""
    file = Path(path)
    if tools is not None:
        tool_names = [spec.name for spec in tools]
    raw = read_config_file(file, "PARLEY_POLICIES", "TOML")
    for key in raw:
        if key not in TABLES:
            raise PolicyFileError(
                file,
                "",
                f"unknown table {key!r}{_nearest(key, TABLES, shown=TABLES)}; write each rule "
                "as a [[rule]] table, each subagent as a [[subagent]] table, the spending "
                "mark as one [budget] table, the grants' lifetimes as one [grants] table, "
                "the agent as one [agent] table and each MCP tool's preview as a "
                "[[preview]] table",
            )
    agent = None
    if "agent" in raw:
        if not isinstance(raw["agent"], dict):
            raise PolicyFileError(file, "", "write the agent as one [agent] table")
        agent = _parsed(AgentTable, raw["agent"], "[agent]", file)
        if agent.instructions is not None and agent.instructions_file is not None:
            raise PolicyFileError(
                file, "[agent]", "give instructions or instructions_file, not both"
            )
    budget = None
    if "budget" in raw:
        if not isinstance(raw["budget"], dict):
            raise PolicyFileError(file, "", "write the budget as one [budget] table")
        budget = _parsed(SpendBudget, raw["budget"], "[budget]", file)
    grants = None
    if "grants" in raw:
        if not isinstance(raw["grants"], dict):
            raise PolicyFileError(file, "", "write the grants' lifetimes as one [grants] table")
        grants = _parsed(GrantLimits, raw["grants"], "[grants]", file)
    subagents: list[SubagentSpec] = []
    for number, table in enumerate(_tables(raw, "subagent", file), start=1):
        where = _label("subagent", table, number)
        subagent = _parsed(SubagentSpec, table, where, file)
        if tool_names is not None:
            if subagent.name in tool_names:
                raise PolicyFileError(file, where, "has the name of a tool; give it another")
            for pattern in subagent.tools:
                if not fnmatch.filter(tool_names, pattern):
                    raise PolicyFileError(file, where, f"tools: {_no_tool(pattern, tool_names)}")
        if subagent.name in {s.name for s in subagents}:
            raise PolicyFileError(file, where, "a subagent before it has this name")
        subagents.append(subagent)
    # A rule may also decide whether a subagent is handed a task.
    specs = None if tools is None else [*tools, *(s.spec() for s in subagents)]
    names = None if tool_names is None else [*tool_names, *(s.name for s in subagents)]
    rules: list[PolicyRule] = []
    for number, table in enumerate(_tables(raw, "rule", file), start=1):
        where = _label("rule", table, number)
        rule = _parsed(PolicyRule, table, where, file)
        if rule.name in {r.name for r in rules}:
            raise PolicyFileError(file, where, "a rule before it has this name")
        if (rule.escalate_to or "").startswith("group:"):
            raise PolicyFileError(
                file, where, "escalate_to names one person, not a group (a group has no link)"
            )
        if names is not None and not [n for n in names if fnmatch.fnmatchcase(n, rule.tool)]:
            raise PolicyFileError(file, where, f"tool: {_no_tool(rule.tool, names)}")
        if specs is not None:
            _check_args(rule, specs, where, file)
        for earlier in rules:
            if earlier.covers(rule, names):
                raise PolicyFileError(
                    file,
                    where,
                    f"never matches: rule {earlier.name!r} before it matches every call "
                    "it would (put the narrower rule first, or remove one)",
                )
        rules.append(rule)
    previews = [
        _parsed(PreviewTable, table, _label("preview", {"name": table.get("tool")}, n), file)
        for n, table in enumerate(_tables(raw, "preview", file), start=1)
    ]
    return Policies(
        rules=rules,
        subagents=subagents,
        budget=budget,
        agent=agent,
        grants=grants,
        previews=previews,
    )


def _check_args(rule: PolicyRule, specs: list[ToolSpec], where: str, file: Path) -> None:
    """Each argument ``rule`` names is one of its tools' (a misspelt name would never
    match), and some value a tool takes for it can match its pattern. A tool whose
    schema takes arguments it does not name (``additionalProperties``) takes any name."""
    matched = [s for s in specs if fnmatch.fnmatchcase(s.name, rule.tool)]
    if any(spec.extra_args_allowed for spec in matched):
        return
    tools = _listed([s.name for s in matched])
    for name, pattern in rule.args.items():
        taking = [(spec, _properties(spec)[name]) for spec in matched if name in _properties(spec)]
        if not taking:
            known = sorted({key for spec in matched for key in _properties(spec)})
            raise PolicyFileError(
                file,
                where,
                f"args: unknown argument {name!r} of {tools}"
                + (_nearest(name, known) or f" (it takes: {_listed(known)})"),
            )
        if not any(pattern_fits(pattern, schema, spec.args_schema) for spec, schema in taking):
            spec, schema = taking[0]
            raise PolicyFileError(
                file,
                where,
                f"args: {name} = {pattern!r} can never match: {spec.name} takes "
                f"{_described(schema, spec.args_schema)} for {name!r}",
            )


def _properties(spec: ToolSpec) -> dict[str, Any]:
    properties = spec.args_schema.get("properties")
    return properties if isinstance(properties, dict) else {}


def _listed(names: list[str]) -> str:
    return (", ".join(names[:LISTED]) + (", ..." if len(names) > LISTED else "")) or "none"


def _described(schema: Any, root: dict[str, Any]) -> str:
    """What values a property's schema takes, in a few words."""
    if not isinstance(schema, dict):
        return "any value"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        section, _, name = ref.removeprefix("#/").partition("/")
        return _described(root.get(section, {}).get(name), root)
    if "const" in schema:
        return f"only {schema['const']!r}"
    if isinstance(schema.get("enum"), list):
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(_described(branch, root) for branch in schema[key])
    kinds = schema.get("type")
    words = {
        "boolean": "true or false",
        "integer": "an integer",
        "number": "a number",
        "null": "null",
        "string": "text",
    }
    if isinstance(kinds, str):
        return words.get(kinds, kinds)
    if isinstance(kinds, list):
        return " or ".join(words.get(k, str(k)) for k in kinds)
    return "any value"


def _tables(raw: dict[str, Any], key: str, file: Path) -> list[dict[str, Any]]:
    tables = raw.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise PolicyFileError(file, "", f"write each {key} as a [[{key}]] table")
    return tables


def _label(kind: str, table: dict[str, Any], number: int) -> str:
    name = table.get("name")
    return f"{kind} {name!r}" if isinstance(name, str) and name else f"{kind} number {number}"


def _parsed(model: type[M], table: dict[str, Any], where: str, file: Path) -> M:
    """``table`` as ``model``, strictly: every key one of its fields, every value of
    the field's own type (TOML has types: ``"true"`` is no boolean, ``2.0`` no
    integer)."""
    known = [f.alias or k for k, f in model.model_fields.items()]  # as the file names them
    # A key it wants and has not got is the likeliest meaning of one it does not know.
    wanted = [
        f.alias or k
        for k, f in model.model_fields.items()
        if f.is_required() and (f.alias or k) not in table
    ]
    problems = [
        f"unknown key {key!r}"
        + (
            _nearest(key, wanted, cutoff=0.4)
            or _nearest(key, known)
            or f" (it takes: {', '.join(known)})"
        )
        for key in table
        if key not in known
    ]
    if problems:
        raise PolicyFileError(file, where, "; ".join(problems))
    try:
        return model.model_validate(table, strict=True)
    except ValidationError as err:
        raise PolicyFileError(file, where, "; ".join(map(_problem, err.errors()))) from None


def _problem(error: Any) -> str:
    """One pydantic error in the file's words: the key, what is wrong, what was there."""
    key = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"missing key {key!r}"
    if not key:
        return message
    if error["loc"][0] == "args" and len(error["loc"]) == 2 and error["type"] == "string_type":
        value = error["input"]
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return f"args: {key[5:]} = {value!r}: a pattern is text, write {json.dumps(text)}"
    if error["type"].endswith("_type") or error["type"] == "literal_error":
        return f"key {key!r}: {message}, not {error['input']!r}"
    return f"key {key!r}: {message}"


def _nearest(
    word: str, known: Any, shown: dict[str, str] | None = None, cutoff: float = 0.6
) -> str:
    """`` (did you mean 'x'?)`` for the known word nearest ``word``, or nothing."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    if not close:
        return ""
    return f" (did you mean {shown[close[0]] if shown else repr(close[0])}?)"


def _no_tool(pattern: str, names: list[str]) -> str:
    """Why ``pattern`` names nothing: the nearest tool, else the worker's tools."""
    return f"{pattern!r} matches no tool on this worker" + (
        _nearest(pattern, names) or f" (it has: {_listed(names)})"
    )
