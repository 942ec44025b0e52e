"""One conversation's context: what ``ConversationWorkflow.__init__`` builds once and hands
to its jobs. Workflow side (deterministic; nothing here issues a command).

- :class:`View`: what every job may read: the state, the start, and what the worker's
  tools and the rules say now. Read only: each part of the state has one writer
  (``tests/test_architecture.py`` checks it from the code).
- :class:`Records`: the writers of the conversation's records, one per part of the state:
  the ``ledger`` (audit log, the turn's results, a message entering), the ``transcript``,
  the ``pending`` calls, the AG-UI ``events``, the ``tally`` of counters and ``dedup``
  (results by update id, decisions by signal, parked updates). A job changes a record
  only through its writer.

Each job takes the view, the records and the few jobs it calls, and nothing more.
"""

from __future__ import annotations

from typing import NamedTuple

from temporalio import workflow

from parley.contracts import ConversationStart, ConversationState, ToolCatalogue
from parley.workflows.record.dedup import Deduplication
from parley.workflows.record.events import EventLog
from parley.workflows.record.ledger import Ledger
from parley.workflows.record.metrics import Tally
from parley.workflows.record.pending import PendingCalls
from parley.workflows.record.transcript import Transcript
from parley.workflows.rules.triage import Proposal


class View(NamedTuple):
    """What every job reads (never writes) of the conversation."""

    state: ConversationState
    start: ConversationStart

    def catalogue(self) -> ToolCatalogue:
        """The worker's tools; in a subagent's conversation, only those it may use."""
        catalogue = self.state.tools or ToolCatalogue(tools=[])
        if self.start.subagent is not None:
            return catalogue.for_subagent(self.start.subagent.name)
        return catalogue

    def proposal(self, catalogue: ToolCatalogue | None = None) -> Proposal:
        """What ``triage`` judges a call by, now."""
        return Proposal(
            catalogue=catalogue or self.catalogue(),
            remembered=self.state.remembered,
            now=workflow.now(),
            expiry_seconds=self.start.pending_expiry_seconds,
            owner=self.state.user_id,
            reviewers=self.state.reviewers,
        )


class Records(NamedTuple):
    """The one writer of each of the conversation's records."""

    ledger: Ledger
    transcript: Transcript
    pending: PendingCalls
    events: EventLog
    tally: Tally
    dedup: Deduplication

    @classmethod
    def of(cls, state: ConversationState) -> Records:
        """Each writer over its part of ``state``, once."""
        events = EventLog(state.events, thread_id=state.session_id)
        transcript, pending = Transcript(state.transcript), PendingCalls(state)
        ledger = Ledger(state, transcript, events, pending)
        tally, dedup = Tally(state.counters), Deduplication(state.dedup)
        return cls(ledger, transcript, pending, events, tally, dedup)
