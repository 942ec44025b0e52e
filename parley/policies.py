"""The policy file (``PARLEY_POLICIES``): approval rules as data. Worker side.

TOML, one ``[[rule]]`` table per rule, tried in order; the first that matches a call
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

A mistake in the file stops the worker at start with the rule and the reason; it is
never half applied.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from pydantic import ValidationError

from parley.contracts import PolicyRule


def load_policies(path: str | Path, *, tool_names: list[str] | None = None) -> list[PolicyRule]:
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"PARLEY_POLICIES: cannot read {file}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"PARLEY_POLICIES: {file} is not TOML: {err}") from None
    unknown = set(raw) - {"rule"}
    if unknown:
        raise ValueError(
            f"PARLEY_POLICIES: {file} has {', '.join(sorted(unknown))}; "
            "write each rule as a [[rule]] table"
        )
    rules: list[PolicyRule] = []
    for number, table in enumerate(raw.get("rule", []), start=1):
        label = table.get("name") or f"number {number}"
        try:
            rule = PolicyRule.model_validate(table)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'rule'}: {e['msg']}" for e in err.errors()
            )
            raise ValueError(f"PARLEY_POLICIES: rule {label} in {file}: {problems}") from None
        if tool_names is not None and not fnmatch.filter(tool_names, rule.tool):
            raise ValueError(
                f"PARLEY_POLICIES: rule {rule.name!r} in {file} names tool {rule.tool!r}, "
                f"which no tool on this worker matches ({', '.join(tool_names) or 'none'})"
            )
        if rule.name in {r.name for r in rules}:
            raise ValueError(f"PARLEY_POLICIES: two rules in {file} are named {rule.name!r}")
        rules.append(rule)
    return rules
