"""Rules the audit suggests (``parley policies suggest``): from the decisions people took on
calls that waited, the policy rules that would have decided each of them the same way,
as policy-file text to review. Never applied: nothing here writes the policy file. Pure
(no I/O, no Temporal) and outside workflows: the CLI (client side) reads the audit and
hands the entries in; it lives in the toolkit beside the policy file's loader
(``parley.tools.policies``), whose rules it writes.

A decided call is one ``decided`` entry per call (a quorum's approvals are one call), by
a person (a remembered decision is the system repeating one, and a rule's judge is no
person: an ``auto`` made of its verdicts would take it out of its calls; both are left
out), with its
tool's canonical arguments when they are known (the transcript's, checked against the
``proposed`` entry's ``args_hash``; an export carries the hash only). Then, per tool:

- the candidates are the whole tool, and each argument's values generalised: values
  that share their first segment (``feat/login``, ``feat/search``) give their common
  prefix up to a separator (``feat/*``), a single value stays exact;
- a candidate is a rule only when every decided call it matches was decided the same
  way (approved: ``auto``; rejected: ``deny``), ``N of N`` with ``N >= minimum``, and no
  call it might match (its arguments unknown) was decided otherwise: an ``auto`` never
  covers a call someone rejected, edited, answered, undid or reverted;
- arguments with one value across its evidence are pinned (the rule claims no more than
  the evidence shows); a rule whose evidence another's holds is left out (of two with
  the same evidence, the narrower is kept);
- a rule the current policy file already decides the same way (its first rule that
  covers it, ``PolicyRule.covers``, says the same) is left out; one that a rule deciding
  otherwise covers is said to go before that rule.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from parley.contracts import AuditEntry, PolicyRule
from parley.contracts.names import args_hash
from parley.contracts.policies import SPEND_CALL

#: How a decided call ended: ``short`` is a quorum's call approved by too few (it never
#: ran on their approval).
Outcome = Literal["approved", "rejected", "edited", "answered", "undone", "reverted", "short"]
#: What each suggested ``decide`` needs every call it covers to have been.
DECIDES: dict[str, Outcome] = {"auto": "approved", "deny": "rejected"}
_ACTIONS: dict[str, Outcome] = {
    "approve": "approved",
    "reject": "rejected",
    "edit": "edited",
    "respond": "answered",
}
#: Where a value's segments end: ``feat/x``, ``release-1``, ``team.a``.
SEPARATORS = "/-_.:@ "
#: How many deciders a rule's comment names before "and N more".
NAMED = 5


@dataclass(frozen=True)
class Decided:
    """One call a person decided: its tool, canonical arguments (None: not known), how
    it ended, who decided and when."""

    session_id: str
    tool_call_id: str
    tool: str
    args: dict[str, Any] | None
    outcome: Outcome
    deciders: tuple[str, ...]
    at: datetime


@dataclass
class Suggestion:
    """A rule to review, and its evidence."""

    rule: PolicyRule
    count: int
    deciders: list[str]
    last: datetime
    sessions: int
    #: The existing rule it must go before (it decides these calls otherwise now).
    before: str | None = None
    #: Existing rules from ``before`` on that it matches every call of: they would
    #: never match after it, so it takes their place.
    replaces: list[str] = field(default_factory=list)
    #: The rule's arguments were not known for some of its evidence (an export).
    args_unknown: bool = False

    def evidence(self) -> str:
        """``approved 12 of 12 times by alice, bob; last 2026-12-01, in 3 conversations``."""
        named = self.deciders[:NAMED]
        more = len(self.deciders) - len(named)
        who = ", ".join(named) + (f" and {more} more" if more else "")
        where = _counted(self.sessions, "conversation")
        outcome = DECIDES[self.rule.decide]
        return (
            f"{outcome} {self.count} of {self.count} times by {who}; "
            f"last {self.last:%Y-%m-%d}, in {where}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.rule.name,
            "tool": self.rule.tool,
            "args": self.rule.args,
            "decide": self.rule.decide,
            "count": self.count,
            "deciders": self.deciders,
            "last": self.last.isoformat(),
            "conversations": self.sessions,
            "before": self.before,
            "replaces": self.replaces,
            "evidence": self.evidence(),
            "toml": rule_text(self),
        }


@dataclass
class Suggestions:
    """What the audit suggests, and what it was read from."""

    rules: list[Suggestion]
    decided: int
    sessions: int
    #: Rules left out because the policy file already decides their calls so.
    covered: list[tuple[PolicyRule, str]] = field(default_factory=list)


def decided_calls(
    session_id: str, entries: Iterable[AuditEntry], args_of: Mapping[str, dict[str, Any]]
) -> list[Decided]:
    """Each call of the conversation that a person decided, from its audit entries;
    ``args_of`` gives a call's canonical arguments by call id (from its transcript),
    used only when they hash to the ``proposed`` entry's ``args_hash``."""
    proposed: dict[str, str] = {}
    decisions: dict[str, list[AuditEntry]] = {}
    after: dict[str, Outcome] = {}
    for entry in entries:
        call_id = entry.tool_call_id
        if call_id is None or entry.name in (None, SPEND_CALL):
            continue
        if entry.event == "proposed" and call_id not in proposed:
            proposed[call_id] = str(entry.detail.get("args_hash", ""))
        elif entry.event == "decided" and entry.channel not in ("remembered", "judge"):
            if entry.detail.get("action") in _ACTIONS:
                decisions.setdefault(call_id, []).append(entry)
        elif entry.event == "undone":
            after[call_id] = "undone"
        elif entry.event == "revert_proposed":
            after[call_id] = "reverted"
    found: list[Decided] = []
    for call_id, taken in decisions.items():
        args = args_of.get(call_id)
        if args is not None and args_hash(args) != proposed.get(call_id):
            args = None  # not the arguments that were decided on
        found.append(
            Decided(
                session_id=session_id,
                tool_call_id=call_id,
                tool=str(taken[-1].name),
                args=args,
                outcome=after.get(call_id) or _outcome(taken),
                deciders=tuple(dict.fromkeys(e.actor for e in taken)),
                at=taken[-1].at,
            )
        )
    return found


def _outcome(taken: list[AuditEntry]) -> Outcome:
    """A call's outcome from its decisions: any reject, answer or edit wins over the
    approvals; a quorum's approvals count once the last says it was met."""
    actions = [_ACTIONS[str(e.detail["action"])] for e in taken]
    for outcome in ("rejected", "answered", "edited"):
        if outcome in actions:
            return outcome  # type: ignore[return-value]
    quorum = re.fullmatch(r"(\d+) of (\d+)", str(taken[-1].detail.get("approvals", "1 of 1")))
    if quorum is not None and int(quorum[1]) < int(quorum[2]):
        return "short"
    return "approved"


def suggest(
    decided: Sequence[Decided], existing: Sequence[PolicyRule] = (), minimum: int = 5
) -> Suggestions:
    """The rules ``decided`` supports (see the module docstring), denies before autos,
    by tool; those ``existing`` (the policy file's rules, in order)
    already decides so are in ``covered``."""
    chosen: list[tuple[Suggestion, set[int]]] = []
    by_tool: dict[str, list[Decided]] = {}
    for call in decided:
        by_tool.setdefault(call.tool, []).append(call)
    for tool in sorted(by_tool):
        calls = by_tool[tool]
        found = [c for c in _candidates(tool, calls, minimum) if c is not None]
        found.sort(key=_most_evidence)
        kept: list[tuple[Suggestion, set[int]]] = []
        for candidate in found:
            if not any(candidate[1] <= other for _, other in kept):
                kept.append(candidate)
        chosen += kept
    result = Suggestions(rules=[], decided=len(decided), sessions=_sessions(decided))
    names = {rule.name for rule in existing}
    for suggestion, _ in sorted(chosen, key=lambda c: c[0].rule.decide != "deny"):
        first = next((rule for rule in existing if rule.covers(suggestion.rule)), None)
        if first is not None and first.decide == suggestion.rule.decide:
            result.covered.append((suggestion.rule, first.name))
            continue
        if first is not None:
            later = existing[list(existing).index(first) :]
            suggestion.before = first.name
            suggestion.replaces = [r.name for r in later if suggestion.rule.covers(r)]
        name = _unique(suggestion.rule.name, names)
        names.add(name)
        suggestion.rule = suggestion.rule.model_copy(update={"name": name})
        result.rules.append(suggestion)
    return result


def _most_evidence(candidate: tuple[Suggestion, set[int]]) -> tuple[Any, ...]:
    """The most calls first; for the same calls, the narrowest rule (the most arguments,
    the longest patterns): it claims no more than its evidence shows."""
    args = candidate[0].rule.args
    return (-len(candidate[1]), -len(args), -sum(map(len, args.values())), sorted(args.items()))


def _candidates(
    tool: str, calls: list[Decided], minimum: int
) -> Iterable[tuple[Suggestion, set[int]] | None]:
    known = [i for i, c in enumerate(calls) if c.args is not None]
    unknown = [i for i, c in enumerate(calls) if c.args is None]
    yield _candidate(tool, calls, {}, list(range(len(calls))), [], minimum)
    names = sorted({name for i in known for name in calls[i].args or {}})
    for name in names:
        values = [_text(calls[i].args[name]) for i in known if name in (calls[i].args or {})]
        for pattern in _patterns([v for v in values if v is not None]):
            probe = PolicyRule(
                name="probe", tool=_escape(tool), args={name: pattern}, decide="auto"
            )
            matched = [i for i in known if probe.matches(tool, calls[i].args or {}, calls[i].at)]
            yield _candidate(tool, calls, {name: pattern}, matched, unknown, minimum)


def _candidate(
    tool: str,
    calls: list[Decided],
    args: dict[str, str],
    evidence: list[int],
    maybe: list[int],
    minimum: int,
) -> tuple[Suggestion, set[int]] | None:
    """The rule ``args`` make, if every call of ``evidence`` (those it matches) and of
    ``maybe`` (those it might: their arguments are unknown) was decided alike."""
    if len(evidence) < minimum:
        return None
    outcomes = {calls[i].outcome for i in evidence}
    decide = next((d for d, o in DECIDES.items() if outcomes == {o}), None)
    if decide is None or any(calls[i].outcome != DECIDES[decide] for i in maybe):
        return None
    shown = [calls[i] for i in evidence]
    pinned = dict(args)
    if all(c.args is not None for c in shown):
        for name in sorted({n for c in shown for n in c.args or {}} - set(args)):
            texts = {
                _text((c.args or {}).get(name)) if name in (c.args or {}) else None for c in shown
            }
            if len(texts) == 1 and (text := texts.pop()) is not None:
                pinned[name] = _escape(text)
    rule = PolicyRule(
        name=_name(decide, tool, pinned), tool=_escape(tool), args=pinned, decide=decide
    )  # type: ignore[arg-type]
    deciders = sorted({who for c in shown for who in c.deciders})
    suggestion = Suggestion(
        rule=rule,
        count=len(shown),
        deciders=deciders,
        last=max(c.at for c in shown),
        sessions=_sessions(shown),
        args_unknown=any(c.args is None for c in shown),
    )
    return suggestion, set(evidence)


def _patterns(values: list[str]) -> list[str]:
    """Each group of values sharing a first segment as one pattern: its values' common
    prefix, cut back to a separator, then ``*``; one value alone stays exact."""
    groups: dict[str, set[str]] = {}
    for value in values:
        cut = next((i for i, c in enumerate(value) if c in SEPARATORS), None)
        groups.setdefault(value if cut is None else value[: cut + 1], set()).add(value)
    patterns = []
    for _, group in sorted(groups.items()):
        if len(group) == 1:
            patterns.append(_escape(next(iter(group))))
            continue
        prefix = _common_prefix(sorted(group))
        prefix = prefix[: max(i for i, c in enumerate(prefix) if c in SEPARATORS) + 1]
        patterns.append(_escape(prefix) + "*")
    return patterns


def _common_prefix(values: list[str]) -> str:
    first, last = values[0], values[-1]  # sorted: they differ the most
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _text(value: Any) -> str | None:
    """An argument's text as a rule compares it (NFKC, case-folded); None for a list or
    an object, which no suggested pattern names."""
    if isinstance(value, dict | list):
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    return unicodedata.normalize("NFKC", text).casefold()


def _escape(text: str) -> str:
    """``text`` as a shell-style pattern that matches it alone."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _name(decide: str, tool: str, args: dict[str, str]) -> str:
    words = [decide, tool, *(re.sub(r"[^a-z0-9]+", "-", v).strip("-") for v in args.values())]
    return "-".join(w for w in words if w)[:64].rstrip("-")


def _unique(name: str, taken: set[str]) -> str:
    number, candidate = 2, name
    while candidate in taken:
        suffix = f"-{number}"
        candidate, number = name[: 64 - len(suffix)] + suffix, number + 1
    return candidate


def _sessions(calls: Iterable[Decided]) -> int:
    return len({c.session_id for c in calls})


def rule_text(suggestion: Suggestion) -> str:
    """One suggested rule as a policy file's ``[[rule]]`` table, after its evidence."""
    rule = suggestion.rule
    lines = [f"# {suggestion.evidence()}"]
    if suggestion.args_unknown:
        lines.append(
            "# (the audit read has no arguments, only their hashes: this rule takes every "
            "call of the tool)"
        )
    if suggestion.replaces:
        named = ", ".join(repr(name) for name in suggestion.replaces)
        lines.append(
            f"# put it in place of rule {named} (it decides these calls now, and would "
            "never match after this one)"
        )
    elif suggestion.before is not None:
        lines.append(f"# put it before rule {suggestion.before!r}, which decides these calls now")
    lines += ["[[rule]]", f"name = {_string(rule.name)}", f"tool = {_string(rule.tool)}"]
    if rule.args:
        pairs = ", ".join(f"{_key(k)} = {_string(v)}" for k, v in rule.args.items())
        lines.append(f"args = {{ {pairs} }}")
    lines.append(f"decide = {_string(rule.decide)}")
    return "\n".join(lines) + "\n"


def policy_text(found: Suggestions, read_from: str) -> str:
    """The suggestions as policy-file text: a header saying what it is, then each rule."""
    head = [
        f"# Suggested by `parley policies suggest` from {_counted(found.decided, 'decided call')} "
        f"in {_counted(found.sessions, 'conversation')} ({read_from}).",
        "# Nothing was applied: review each rule, then add it to the policy file "
        "(PARLEY_POLICIES).",
    ]
    for rule, by in found.covered:
        head.append(f"# left out: {rule.name} (rule {by!r} already decides those calls so)")
    if not found.rules:
        head.append("# no rule: no group of calls was decided the same way often enough")
    return "\n".join(head) + "\n" + "".join("\n" + rule_text(s) for s in found.rules)


def _counted(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def _string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL is escaped too)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _string(name)
