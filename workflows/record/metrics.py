"""Parley's own counters, emitted from the workflow through the SDK's metric meter.
Workflow side: the SDK drops them while a workflow replays, so each counts once.

They reach whatever the worker's runtime exports (Prometheus with
``PARLEY_METRICS_ADDRESS``), next to the SDK's own ``temporal_*`` metrics:

- ``parley_turns`` — turns started by a message;
- ``parley_decisions{action}`` — decisions on pending calls;
- ``parley_tool_runs{tool, status}`` — tool runs by outcome (success, error...);
- ``parley_approvals_requested`` / ``parley_approvals_answered`` — calls that started
  waiting for a decision / stopped waiting (decided, expired, ended): the approvals
  waiting now are ``requested - answered``;
- ``parley_model_tokens{kind}`` — tokens of model calls as the provider reported them,
  ``kind`` ``input`` or ``output`` (their sum is the total; ``parley.workflows.turn.usage``).

Decisions and approvals count in top-level conversations only: a subagent's calls wait
on its parent's pending list and are decided there, so they count there, once.

:class:`Tally` is the one writer of the conversation's own counters
(``ConversationState.counters``, on every snapshot), and counts ``parley_turns`` with them.
"""

from __future__ import annotations

from temporalio import workflow

from parley.contracts import Counters


def _count(
    name: str, description: str, amount: int = 1, *, top_level: bool = False, **labels: str
) -> None:
    if top_level and workflow.info().parent is not None:
        return
    if amount:
        counter = workflow.metric_meter().create_counter(name, description)
        counter.add(amount, labels or None)


def turn_started() -> None:
    _count("parley_turns", "Turns started by a message")


def decided(action: str) -> None:
    _count("parley_decisions", "Decisions on pending tool calls", top_level=True, action=action)


def tool_ran(tool: str, status: str) -> None:
    _count("parley_tool_runs", "Tool runs by outcome", tool=tool, status=status)


def approvals_requested(count: int) -> None:
    _count(
        "parley_approvals_requested",
        "Tool calls that started waiting for a decision",
        count,
        top_level=True,
    )


def approvals_answered(count: int) -> None:
    _count(
        "parley_approvals_answered",
        "Tool calls that stopped waiting for a decision",
        count,
        top_level=True,
    )


def model_tokens(input_tokens: int, output_tokens: int) -> None:
    description = "Tokens of model calls as the provider reported them, by kind"
    _count("parley_model_tokens", description, input_tokens, kind="input")
    _count("parley_model_tokens", description, output_tokens, kind="output")


class Tally:
    """The conversation's counters (carried across continue-as-new): each job counts its
    own steps through this, and nothing else writes them."""

    def __init__(self, counters: Counters) -> None:
        self._counters = counters

    def turn(self) -> None:
        """A message starts its turn (or joins the turn in flight)."""
        self._counters.turns += 1
        turn_started()

    def model_call(self) -> None:
        self._counters.model_calls += 1

    def tool_run(self) -> None:
        self._counters.tool_runs += 1

    def decisions(self, count: int) -> None:
        self._counters.decisions += count

    def continued_as_new(self) -> None:
        self._counters.continued_as_new += 1

    def subagent(self) -> int:
        """A subagent starts: its number in this conversation (from 1)."""
        self._counters.subagents += 1
        return self._counters.subagents

    def rewound(self) -> None:
        self._counters.rewinds += 1
