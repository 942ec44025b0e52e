"""The judge: a model that a rule (``PolicyRule.judge``) asks about a call before a person.
Both sides of the Temporal boundary: the workflow sends a ``JudgeCallInput``
(``parley.contracts.judge_calls``) to the ``parley.judge_call`` activity and applies the
:class:`JudgeVerdict` it returns; every surface shows the verdict with the call.
Pydantic models, names and pure rules: no I/O.

What the judge decides is bounded by Parley, not by what it reads: it is asked only
about a call its own rule matched (``deny`` rules and the rules before it were
evaluated first), its verdict applies only to the arguments it saw (``args_hash``), and
under a quorum or a reviewer its approve is an opinion, never an approval
(:func:`judge_outcome`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from parley.contracts.payloads import Contract
from parley.contracts.policies import PolicyRule

#: Runs a rule's judge (``activities.judging``).
JUDGE_CALL = "parley.judge_call"

#: How long the judge's model may take to answer (then: doubt).
JUDGE_TIMEOUT_SECONDS = 120.0
#: The conversation excerpt the judge reads: at most this many messages, each cut to
#: ``EXCERPT_MESSAGE_CHARS``, the latest ones.
EXCERPT_MESSAGES = 8
EXCERPT_MESSAGE_CHARS = 800
#: A verdict's reason is one line of at most this many characters.
REASON_CHARS = 300

Verdict = Literal["approve", "deny", "escalate"]


def judge_actor(model: str) -> str:
    """Who a judge's decision is by, in the audit log: ``judge:<model>``."""
    return f"judge:{model}"


class ExcerptMessage(Contract):
    """One message of the conversation as the judge reads it: untrusted data."""

    role: str
    text: str


class JudgeVerdict(Contract):
    """What the judge said of one call, and what Parley made of it (``outcome``)."""

    verdict: Verdict
    #: One line; what every surface shows ("approved by judge: read-only query").
    reason: str
    #: The judge's model, as the rule names it (``judge_model``).
    model: str
    #: The arguments it judged: the verdict decides nothing for any others.
    args_hash: str
    #: The judge gave no verdict (a timeout, an answer that was no verdict): ``verdict``
    #: is then ``escalate`` and ``reason`` says why; the rule's ``on_doubt`` applies.
    failed: bool = False
    #: The tokens its model call used (``input_tokens``, ``output_tokens``, ...).
    usage: dict[str, int] = Field(default_factory=dict)
    #: What Parley did with it: ``ran`` (approved), ``rejected`` (deny, or doubt that
    #: denies), ``waits`` (escalate: a person decides), ``opinion`` (an approve that a
    #: quorum or a reviewer rule does not take), ``stale`` (the arguments changed).
    outcome: Literal["ran", "rejected", "waits", "opinion", "stale"] | None = None

    def label(self) -> str:
        """The verdict as a surface says it: ``approved by judge: <reason>``."""
        if self.outcome == "opinion":
            return f"judge's opinion (not an approval here): approve: {self.reason}"
        if self.failed:
            return f"no verdict from the judge: {self.reason}"
        if self.outcome == "stale":
            return f"the judge's {self.verdict} was of other arguments; a person decides"
        said = {"approve": "approved", "deny": "denied", "escalate": "escalated"}[self.verdict]
        return f"{said} by judge: {self.reason}"


def judge_outcome(
    verdict: JudgeVerdict,
    rule: PolicyRule,
    args_hash_now: str,
    *,
    approvals_needed: int,
    reviewer_rule: str | None,
    deny_rule: str | None = None,
) -> Literal["ran", "rejected", "waits", "opinion", "stale"]:
    """What Parley does with ``verdict`` on a call whose arguments hash to
    ``args_hash_now``: pure, and the one place these guards are decided. ``deny_rule``:
    a ``deny`` rule that matches the call too (anywhere in the file): the judge's approve
    never runs what a ``deny`` rule covers."""
    if verdict.args_hash != args_hash_now:
        return "stale"
    if verdict.verdict == "approve" and not verdict.failed:
        quorum = approvals_needed > 1 or reviewer_rule is not None or rule.requires_reviewer
        if quorum or deny_rule is not None:
            return "opinion"
        return "ran"
    if verdict.verdict == "deny" and not verdict.failed:
        return "rejected"
    return "rejected" if rule.on_doubt == "deny" else "waits"
