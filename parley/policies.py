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

One ``[[subagent]]`` table per subagent (``parley.contracts.SubagentSpec``): the model
sees it as a tool that takes a task; the task runs as a child conversation that may use
only the tools ``tools`` names, behind the same rules and gate::

    [[subagent]]
    name = "planner"
    description = "Works out and records plans; it cannot touch git."
    tools = ["list_plans", "get_plan", "create_plan"]
    instructions = "You plan work. Record each plan with create_plan."

One ``[budget]`` table may set a spending mark: once a conversation's model calls have
used that many tokens in all, its next model call waits for a decision (approve raises
the mark by the same step, reject ends the turn)::

    [budget]
    confirm_over_tokens = 200000

A mistake in the file stops the worker at start with the rule (or subagent) and the
reason; it is never half applied.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from parley.contracts import PolicyRule, SpendBudget, SubagentSpec
from parley.loading import read_config_file

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Policies:
    """What a policy file holds."""

    rules: list[PolicyRule] = field(default_factory=list)
    subagents: list[SubagentSpec] = field(default_factory=list)
    budget: SpendBudget | None = None


def load_policies(path: str | Path, *, tool_names: list[str] | None = None) -> Policies:
    """The file's rules and subagents, checked against the worker's tools when
    ``tool_names`` is given (a pattern that matches none is a mistake)."""
    file = Path(path)
    raw = read_config_file(file, "PARLEY_POLICIES", "TOML")
    unknown = set(raw) - {"rule", "subagent", "budget"}
    if unknown:
        raise ValueError(
            f"PARLEY_POLICIES: {file} has {', '.join(sorted(unknown))}; "
            "write each rule as a [[rule]] table, each subagent as a [[subagent]] table "
            "and the spending mark as one [budget] table"
        )
    budget = None
    if "budget" in raw:
        if not isinstance(raw["budget"], dict):
            raise ValueError(f"PARLEY_POLICIES: write the budget in {file} as one [budget] table")
        budget = _parsed(SpendBudget, raw["budget"], "[budget]", file)
    subagents: list[SubagentSpec] = []
    for number, table in enumerate(_tables(raw, "subagent", file), start=1):
        subagent = _parsed(SubagentSpec, table, f"subagent {table.get('name') or number}", file)
        if tool_names is not None:
            if subagent.name in tool_names:
                raise ValueError(
                    f"PARLEY_POLICIES: subagent {subagent.name!r} in {file} has the name "
                    "of a tool; give it another"
                )
            for pattern in subagent.tools:
                if not fnmatch.filter(tool_names, pattern):
                    raise ValueError(
                        f"PARLEY_POLICIES: subagent {subagent.name!r} in {file} may use "
                        f"{pattern!r}, which no tool on this worker matches "
                        f"({', '.join(tool_names) or 'none'})"
                    )
        if subagent.name in {s.name for s in subagents}:
            raise ValueError(
                f"PARLEY_POLICIES: two subagents in {file} are named {subagent.name!r}"
            )
        subagents.append(subagent)
    # A rule may also decide whether a subagent is handed a task.
    callable_names = None if tool_names is None else [*tool_names, *(s.name for s in subagents)]
    rules: list[PolicyRule] = []
    for number, table in enumerate(_tables(raw, "rule", file), start=1):
        rule = _parsed(PolicyRule, table, f"rule {table.get('name') or f'number {number}'}", file)
        if callable_names is not None and not fnmatch.filter(callable_names, rule.tool):
            raise ValueError(
                f"PARLEY_POLICIES: rule {rule.name!r} in {file} names tool {rule.tool!r}, "
                f"which no tool on this worker matches ({', '.join(callable_names) or 'none'})"
            )
        if rule.name in {r.name for r in rules}:
            raise ValueError(f"PARLEY_POLICIES: two rules in {file} are named {rule.name!r}")
        rules.append(rule)
    return Policies(rules=rules, subagents=subagents, budget=budget)


def _tables(raw: dict[str, Any], key: str, file: Path) -> list[dict[str, Any]]:
    tables = raw.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ValueError(f"PARLEY_POLICIES: write each {key} in {file} as a [[{key}]] table")
    return tables


def _parsed(model: type[M], table: dict[str, Any], label: str, file: Path) -> M:
    try:
        return model.model_validate(table)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'table'}: {e['msg']}" for e in err.errors()
        )
        raise ValueError(f"PARLEY_POLICIES: {label} in {file}: {problems}") from None
