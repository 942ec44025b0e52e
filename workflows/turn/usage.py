"""A conversation's token usage, kept by the workflow. Workflow side: deterministic.

Each model call's usage (``Usage.of_call``: its reply's ``usage_metadata``, which the
activity keeps, streamed or not) is added to the turn's and to the conversation's
(``ConversationState.usage``, carried across continue-as-new), and counted in the
``parley_model_tokens{kind}`` metric. At the end of each run the conversation's totals
and the run's go out as the AG-UI ``CUSTOM`` event ``parley.usage``; the turn's usage is
on its ``TurnResult``, the conversation's on every snapshot (``parley show``, the
gateway's conversation JSON).

A rule's judge (``workflows.turn.judging``) is a model call too: its verdict's tokens
(``JudgeVerdict.usage``) are added the same way (``add_judged``; patch ``judge-usage``),
under the judge's model where the conversation counts usage per model, so ``parley
show``, the snapshot and the spending mark (``spending``) see what a judge cost.

A subagent's model calls are counted in its own conversation, which reports its usage
to its parent (``Subagents``): the parent's snapshot and ``parley.usage`` event show the
tree's usage (its own and its subagents'), and the subagents' apart (``subagents``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import ConversationState, Usage
    from parley.contracts.judging import JudgeVerdict
    from parley.workflows.record import metrics
    from parley.workflows.record.events import EventLog

#: The AG-UI ``CUSTOM`` event at the end of each run: ``value`` is the conversation's
#: usage (``input_tokens``, ``output_tokens``, ``total_tokens``, ``model_calls``) with
#: the run's own under ``run``.
USAGE_EVENT = "parley.usage"
#: Before this patch a judge's tokens were audited only, not counted as usage.
JUDGE_USAGE = "judge-usage"


def judge_usage(verdict: JudgeVerdict, *, per_model: bool) -> Usage | None:
    """A judge's model call as usage: the tokens its verdict reports, one model call,
    under the judge's model when ``per_model`` (the conversation counts usage per
    model). None for a verdict that failed before any model answered (no usage)."""
    if verdict.failed and not verdict.usage:
        return None
    call = Usage.of_call(SimpleNamespace(usage_metadata=dict(verdict.usage)))
    return call.under(verdict.model if per_model else None)


class UsageMeter:
    """Adds up the usage of one run's model calls and the conversation's."""

    def __init__(self, state: ConversationState, events: EventLog) -> None:
        self._state = state
        self._events = events
        self._turn: Usage | None = None

    def begin_turn(self) -> None:
        self._turn = None

    def add(self, reply: Any) -> None:
        """Record one model call's usage, from its reply."""
        self.add_usage(Usage.of_call(reply))

    def add_usage(self, call: Usage) -> None:
        """Record a model call's usage that came back without its reply (a summary
        written by another activity, say: ``Usage.of_call`` of its reply)."""
        self._turn = call if self._turn is None else self._turn + call
        self._state.usage = call if self._state.usage is None else self._state.usage + call
        metrics.model_tokens(call.input_tokens, call.output_tokens)

    def add_judged(self, verdict: JudgeVerdict) -> None:
        """Record a rule's judge's model call (its ``usage``), if it made one."""
        usage = self._state.usage
        call = judge_usage(verdict, per_model=usage is not None and usage.by_model is not None)
        if call is not None:
            self.add_usage(call)

    @property
    def turn(self) -> Usage | None:
        """The usage of this turn's model calls so far (None: it called no model)."""
        return self._turn

    def announce(self) -> None:
        """The ``parley.usage`` event: sent before the run's last event (``RUN_FINISHED``
        or ``RUN_ERROR``), which AG-UI clients take as the end of the run."""
        total = self._state.tree_usage()
        value = {
            **total.model_dump(),
            "run": (self._turn or Usage()).model_dump(),
            "subagents": self._state.delegations.usage().model_dump(),
        }
        self._events.custom(USAGE_EVENT, value)
