"""Approval policies as data: rules that decide, per tool and per argument, whether a
proposed call runs at once (``auto``), waits for a decision (``confirm``) or is refused
(``deny``). Both sides of the Temporal boundary.

The worker loads the rules from the policy file (``PARLEY_POLICIES``) and sends them
with its tool catalogue; the workflow evaluates them with :func:`evaluate` at the
moment a call is proposed (``workflow.now()``), and the worker evaluates them again,
with the same inputs, before it runs a ``confirm`` tool that a rule made ``auto``.
:func:`evaluate` is pure: the same rules, tool, arguments and instant give the same
answer, on replay and on any worker.

A rule matches a call when:

- ``tool`` (a shell-style pattern, ``fnmatch``) matches the tool's name;
- every pattern in ``args`` matches the argument of that name (its canonical value as
  text, both NFKC-normalized and case-folded; a missing argument never matches);
- with ``hours`` (``"09:00-18:00"``) and/or ``days`` (``"mon-fri"``, ``"sat,sun"``),
  the instant (shifted by ``utc_offset``) lies inside that window, or outside it when
  ``outside`` is true.

The first rule that matches decides; a call no rule matches keeps its tool's own
policy. Remembered decisions (``Decision.remember``) are kept in the conversation's
state and apply after the rules, to calls that would otherwise wait for a decision.
"""

from __future__ import annotations

import fnmatch
import json
import unicodedata
from datetime import datetime, time, timedelta
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from parley.contracts.names import ToolPolicy
from parley.contracts.payloads import Contract

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


#: A rule's judge (``PolicyRule.judge``): left out of its digest when unset.
JUDGE_FIELDS = ("judge", "judge_model", "judge_instructions", "on_doubt")

#: The name of the pending call that asks whether a conversation may go on spending.
SPEND_CALL = "parley_continue_spending"


class SpendBudget(Contract):
    """The policy file's ``[budget]``: once a conversation's model calls have used
    ``confirm_over_tokens`` tokens in all, its next model call waits for a decision, as a
    tool call does (``SPEND_CALL``). Approving raises the mark by the same step;
    rejecting ends the turn."""

    model_config = ConfigDict(extra="forbid")

    confirm_over_tokens: int = Field(ge=1)


class PolicyRule(Contract):
    """One ``[[rule]]`` of the policy file. The file's loader (``parley.tools.policies``) takes
    no key this model does not name (a misspelt ``requires_reviewr`` is a mistake, never
    a rule without a reviewer); the model itself ignores unknown keys, because it
    travels in history inside the tool catalogue, and a build rolled back must read a
    rule that a newer build wrote with a field it does not know."""

    name: str = Field(min_length=1, max_length=64)
    tool: str = Field(min_length=1)
    args: dict[str, str] = Field(default_factory=dict)
    hours: str | None = None
    days: str | None = None
    outside: bool = False
    utc_offset: str = "+00:00"
    decide: ToolPolicy
    #: For ``confirm``: how long the call waits for a decision (seconds; default the
    #: conversation's pending expiry), and what happens then: ``expire`` (as without a
    #: rule), ``reject`` (answered rejected with ``timeout_reason``, which the model
    #: reads) or ``escalate`` (``escalate_to`` is notified and the call waits as long
    #: again, then expires).
    timeout_seconds: float | None = Field(default=None, gt=0, le=10 * 365 * 24 * 3600)
    on_timeout: Literal["expire", "reject", "escalate"] = "expire"
    timeout_reason: str | None = None
    escalate_to: str | None = None
    #: For ``confirm``: only one of the conversation's reviewers, not the user who
    #: asked, may approve or edit the call (anyone may reject it).
    requires_reviewer: bool = False
    #: For ``confirm``: a quorum. The call runs once this many distinct reviewers (the
    #: requester never counts) approved the same canonical arguments; above 1 it implies
    #: ``requires_reviewer``.
    approvals: int = Field(default=1, ge=1, le=16)
    #: For ``confirm``: an approved call waits this long (a durable timer) before it
    #: runs, and the approver or the owner may undo it meanwhile (``parley undo``).
    undo_seconds: int | None = Field(default=None, ge=1, le=24 * 3600)
    #: For ``confirm``: a judge decides first (``"model"``: ``judge_model``, a model as
    #: ``PARLEY_MODEL`` names one, run apart from the agent by ``parley.judge_call``),
    #: told what to check by ``judge_instructions``. Its approve runs the call (never one
    #: under a quorum or a reviewer: there it is an opinion shown with the call); its
    #: deny rejects it with its reason; its escalate, or no verdict, is ``on_doubt``:
    #: the call waits for a person (``escalate_to`` is told, if named) or is rejected
    #: (None: ``escalate``; left out of the rule's payload, as every unset field).
    judge: Literal["model"] | None = None
    judge_model: str | None = Field(default=None, min_length=1)
    judge_instructions: str | None = Field(default=None, max_length=2000)
    on_doubt: Literal["escalate", "deny"] | None = None

    @field_validator("hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is not None:
            start, end = _window(value)
            if start == end:
                raise ValueError(f"hours {value!r} is an empty window")
        return value

    @field_validator("days")
    @classmethod
    def _days(cls, value: str | None) -> str | None:
        if value is not None:
            _day_set(value)
        return value

    @field_validator("utc_offset")
    @classmethod
    def _offset(cls, value: str) -> str:
        _offset_of(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> PolicyRule:
        if self.outside and self.hours is None and self.days is None:
            raise ValueError("'outside' needs 'hours' or 'days'")
        if self.on_timeout == "escalate" and not self.escalate_to:
            raise ValueError("on_timeout 'escalate' needs 'escalate_to'")
        timed = self.timeout_seconds is not None or self.on_timeout != "expire"
        waits = timed or self.requires_reviewer or self.approvals > 1 or self.undo_seconds
        if waits and self.decide != "confirm":
            raise ValueError(
                "a timeout, a reviewer, approvals or an undo window apply to calls that wait "
                "(decide 'confirm')"
            )
        if self.judge is None:
            if self.judge_model or self.judge_instructions or self.on_doubt:
                raise ValueError(
                    'judge_model, judge_instructions and on_doubt need judge = "model"'
                )
        elif self.decide != "confirm":
            raise ValueError("a judge decides calls that wait (decide 'confirm')")
        elif not self.judge_model:
            raise ValueError(
                'judge = "model" needs judge_model (a model as PARLEY_MODEL names one)'
            )
        return self

    def described(self) -> dict[str, Any]:
        """The rule as the catalogue's version digests it: the judge's fields only when
        set, so a rule without a judge digests as it did before they existed."""
        unset = {k for k in JUDGE_FIELDS if getattr(self, k) is None}
        return self.model_dump(mode="json", exclude=unset)

    def matches(self, tool: str, args: dict[str, Any], at: datetime) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        for name, pattern in self.args.items():
            if name not in args or not fnmatch.fnmatchcase(_folded(args[name]), _fold(pattern)):
                return False
        if self.hours is None and self.days is None:
            return True
        local = at + _offset_of(self.utc_offset)
        inside = True
        if self.days is not None:
            inside = DAYS[local.weekday()] in _day_set(self.days)
        if inside and self.hours is not None:
            start, end = _window(self.hours)
            now = local.time()
            inside = start <= now < end if start <= end else (now >= start or now < end)
        return inside != self.outside

    def covers(self, later: PolicyRule, tools: list[str] | None = None) -> bool:
        """Whether this rule matches every call ``later`` matches, so that ``later``,
        tried after it, never decides. Only what is certain counts (never a false
        alarm): the same time window or none, every tool ``later`` names among this
        rule's (of ``tools`` when given, else by pattern), and each of this rule's
        argument patterns taking every value ``later``'s pattern for it takes."""
        if (self.hours is not None or self.days is not None) and (
            self.hours,
            self.days,
            self.outside,
            self.utc_offset,
        ) != (later.hours, later.days, later.outside, later.utc_offset):
            return False
        if tools is not None:
            if not {t for t in tools if fnmatch.fnmatchcase(t, later.tool)} <= {
                t for t in tools if fnmatch.fnmatchcase(t, self.tool)
            }:
                return False
        elif not _pattern_covers(self.tool, later.tool):
            return False
        return all(
            name in later.args and _pattern_covers(_fold(pattern), _fold(later.args[name]))
            for name, pattern in self.args.items()
        )


def pattern_fits(pattern: str, schema: Any, root: dict[str, Any] | None = None) -> bool:
    """Whether some value that the JSON ``schema`` accepts can match ``pattern`` as a rule
    compares them (the value's text, see :func:`_folded`). ``root`` is the tool's whole
    schema, for ``$ref``. True whenever unsure: only a pattern that can never match (a
    value outside an enum, ``yes`` for a boolean, ``3.0`` for an integer) is False."""
    if not isinstance(schema, dict):
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str):
        section, _, name = ref.removeprefix("#/").partition("/")
        target = (root or {}).get(section, {})
        if not isinstance(target, dict) or name not in target:
            return True
        return pattern_fits(pattern, target[name], root)
    if "const" in schema:
        return _value_fits(pattern, schema["const"])
    if isinstance(schema.get("enum"), list):
        return any(_value_fits(pattern, value) for value in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return any(pattern_fits(pattern, branch, root) for branch in schema[key])
    if isinstance(schema.get("allOf"), list):
        return all(pattern_fits(pattern, branch, root) for branch in schema["allOf"])
    kinds = schema.get("type")
    if kinds is None:
        return True
    return any(
        _kind_fits(_fold(pattern), kind) for kind in ([kinds] if isinstance(kinds, str) else kinds)
    )


def _value_fits(pattern: str, value: Any) -> bool:
    return fnmatch.fnmatchcase(_folded(value), _fold(pattern))


def _kind_fits(pattern: str, kind: Any) -> bool:
    """Whether a value of JSON type ``kind`` can have text that ``pattern`` (folded)
    matches. A number's pattern with wildcards is taken on trust."""
    if kind == "boolean":
        return any(fnmatch.fnmatchcase(text, pattern) for text in ("true", "false"))
    if kind == "null":
        return fnmatch.fnmatchcase("null", pattern)
    if kind in ("integer", "number") and not _magic(pattern):
        try:
            value = json.loads(pattern)
        except ValueError:
            return False
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind == "integer" and not isinstance(value, int):
            return False
        return json.dumps(value) == pattern
    return True


def _magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _pattern_covers(wider: str, narrower: str) -> bool:
    """Whether every text ``narrower`` matches, ``wider`` matches: the same pattern,
    only ``*``, or a ``narrower`` without wildcards that ``wider`` matches."""
    if wider == narrower or (wider and set(wider) == {"*"}):
        return True
    return not _magic(narrower) and fnmatch.fnmatchcase(narrower, wider)


class PolicyOutcome(Contract):
    """What the rules say of one call, and which rule said it (None: the tool's own
    policy, or a remembered decision when ``remembered`` is set)."""

    policy: ToolPolicy
    rule: str | None = None
    remembered: bool = False
    #: The matched rule's timeout, for a call that waits.
    timeout_seconds: float | None = None
    on_timeout: Literal["expire", "reject", "escalate"] = "expire"
    timeout_reason: str | None = None
    escalate_to: str | None = None
    requires_reviewer: bool = False
    approvals: int = 1
    undo_seconds: int | None = None

    def reason(self) -> str:
        if self.remembered:
            return f"{self.policy}: a decision remembered in this conversation"
        if self.rule is None:
            return f"{self.policy}: the tool's own policy"
        return f"{self.policy} because rule `{self.rule}` matched"


def evaluate(
    rules: list[PolicyRule], tool: str, args: dict[str, Any], at: datetime, default: ToolPolicy
) -> PolicyOutcome:
    for rule in rules:
        if rule.matches(tool, args, at):
            return PolicyOutcome(
                policy=rule.decide,
                rule=rule.name,
                timeout_seconds=rule.timeout_seconds,
                on_timeout=rule.on_timeout,
                timeout_reason=rule.timeout_reason,
                escalate_to=rule.escalate_to,
                requires_reviewer=rule.requires_reviewer or rule.approvals > 1,
                approvals=rule.approvals,
                undo_seconds=rule.undo_seconds,
            )
    return PolicyOutcome(policy=default)


def call_shape(tool: str, args: dict[str, Any]) -> str:
    """What "an identical-shaped call" means for ``remember``: the same tool with the
    same arguments (canonical JSON)."""
    return f"{tool} {json.dumps(args, sort_keys=True, separators=(',', ':'), default=str)}"


def _folded(value: Any) -> str:
    """An argument's text as a pattern compares it: see :func:`_fold`."""
    return _fold(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def _fold(text: str) -> str:
    """Unicode NFKC, then case-folded: ``FIX``, ``ｆｉｘ`` and ``fix`` are one value to a
    rule (the arguments are already canonical: the tool's own form trimmed them)."""
    return unicodedata.normalize("NFKC", text).casefold()


def _window(value: str) -> tuple[time, time]:
    try:
        start, end = (time.fromisoformat(part.strip()) for part in value.split("-"))
    except ValueError:
        raise ValueError(f"hours {value!r} is not of the form HH:MM-HH:MM") from None
    return start, end


def _day_set(value: str) -> set[str]:
    days: set[str] = set()
    for part in value.lower().replace(" ", "").split(","):
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise ValueError(f"days {value!r}: use mon..sun, as 'mon-fri' or 'sat,sun'")
        i, j = DAYS.index(first), DAYS.index(last or first)
        days.update(DAYS[i : j + 1] if i <= j else DAYS[i:] + DAYS[: j + 1])
    return days


def _offset_of(value: str) -> timedelta:
    sign = -1 if value.startswith("-") else 1
    try:
        hours, minutes = value.lstrip("+-").split(":")
        offset = timedelta(hours=int(hours), minutes=int(minutes))
    except ValueError:
        raise ValueError(f"utc_offset {value!r} is not of the form +HH:MM") from None
    if offset > timedelta(hours=14):
        raise ValueError(f"utc_offset {value!r} is beyond ±14:00")
    return sign * offset
