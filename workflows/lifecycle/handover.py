"""When a run hands the conversation over to the next (continue-as-new). Workflow side
(deterministic: it reads only ``workflow.info()`` and the state).

Every per-run limit has a plan here. Temporal caps a run at 2,000 updates, 10,000
signals, 51,200 history events and 50 MB of history (it terminates a run past the last
two); a run continues as new at its next rest, turn or no turn, once it has accepted
:data:`UPDATES_PER_RUN` updates or :data:`SIGNALS_PER_RUN` signals (``stream_delta``
batches count), its history holds :data:`HANDOVER_HISTORY_BYTES` or
:data:`HANDOVER_HISTORY_EVENTS`, or Temporal suggests it (from about 4 MB on a
default server). These counts start at zero in each run, so the hand-over never loops;
meanwhile a message that would wait for a turn is refused (:meth:`Handover.pressing`), so
queued messages cannot keep the run from resting. Inside one turn no model call or tool
starts once the history passes :data:`TURN_HISTORY_BYTES` or :data:`TURN_HISTORY_EVENTS`
(``execution.check_history_room``): the turn fails in one line and the run hands over
at its rest. The conversation's own history threshold
(``continue_as_new_after_events``) applies only after a turn in the run, so a small
threshold cannot loop either. A deploy (a newer worker build made current) moves the
run too, once per build, and so does a rewind (``rewind``: the run before keeps the
history that was cut away). Nothing moves while a turn, a queued decision, a notification
or a subagent is in flight: those belong to this run.

The handlers' prologue (``intake``) counts every update and signal here, once, as it
arrives (:meth:`Handover.count_update`, :meth:`Handover.count_signal`): ``signals`` is every
signal, ``stream_delta`` included, as Temporal counts them. A run recorded before
:data:`BOUNDED_HANDOVER` handed over on the signals other than ``stream_delta`` only,
and still does (:meth:`Handover.pressing`), so no recorded history decides otherwise.
"""

from __future__ import annotations

from temporalio import workflow

from parley.contracts import ConversationStart, ConversationState
from parley.workflows.record.ledger import Ledger

#: Per-run budgets, far below Temporal's limits (2,000 updates, 10,000 signals per run).
UPDATES_PER_RUN = 1_000
SIGNALS_PER_RUN = 5_000
#: Past this many updates in one run (a turn or a subagent holding the run for long),
#: followers (``wait_for_events``) are refused, keeping the rest for decisions.
FOLLOWER_UPDATES_PER_RUN = 1_500
#: History a run hands over at, at its next rest, whatever the server suggests
#: (Temporal terminates a run at 50 MB or 51,200 events).
MB = 1024 * 1024
HANDOVER_HISTORY_BYTES = 8 * MB
HANDOVER_HISTORY_EVENTS = 20_000
#: Within a turn, no model call or tool starts past these: what one step adds (a model
#: call with its streaming, or a tool, each under 1 MB of inline payloads) still ends
#: far below Temporal's limits.
TURN_HISTORY_BYTES = 24 * MB
TURN_HISTORY_EVENTS = 40_000
#: The patch under which a run hands over on its history's size and length and counts
#: its ``stream_delta`` signals; runs recorded before it replay as they ran.
BOUNDED_HANDOVER = "bounded-history-handover"


class Handover:
    def __init__(self, state: ConversationState, start: ConversationStart, ledger: Ledger):
        self._state = state
        self._start = start
        self._ledger = ledger
        #: ``state.runs`` when this run began: the history threshold needs a turn first.
        self._runs_at_start = state.runs
        #: Updates and signals (every one) this run accepted: Temporal limits both per run.
        self.updates = 0
        self.signals = 0
        #: Of ``signals``, the ``stream_delta`` batches (see :meth:`pressing`).
        self.stream_signals = 0
        #: Set by :meth:`begin`: this run hands over on history and stream signals too.
        self.bounded = False
        #: A rewind cut the state: the next run starts from it (set by ``rewind``).
        self.rewound = False

    def begin(self) -> None:
        """At the run's start, once: whether it runs under :data:`BOUNDED_HANDOVER` (a
        run recorded before it never handed over on these, and replays so)."""
        self.bounded = workflow.patched(BOUNDED_HANDOVER)

    def count_update(self) -> None:
        self.updates += 1

    def count_signal(self, *, stream: bool = False) -> None:
        """One more signal; ``stream``: a ``stream_delta`` batch."""
        self.signals += 1
        self.stream_signals += stream

    @property
    def followers_refused(self) -> bool:
        return self.updates >= FOLLOWER_UPDATES_PER_RUN

    def due(self, *, busy: bool) -> bool:
        """Whether to carry the state into a fresh run now. ``busy``: something of this
        run is in flight (a turn, a queued decision, a notification, a subagent)."""
        if busy:
            return False
        if self.rewound or self.upgrade_due():
            return True
        info = workflow.info()
        if self.pressing() or info.is_continue_as_new_suggested():
            return True
        if self._state.runs == self._runs_at_start:
            return False
        return info.get_current_history_length() >= self._start.continue_as_new_after_events

    def pressing(self) -> bool:
        """Whether this run must hand over at its next rest, whatever it holds: a
        per-run limit is near (updates, signals, history). Until then, messages that
        would wait for a turn are refused, so the run comes to rest. A run recorded
        before :data:`BOUNDED_HANDOVER` counts its signals but ``stream_delta``, as it did."""
        signals = self.signals if self.bounded else self.signals - self.stream_signals
        if self.updates >= UPDATES_PER_RUN or signals >= SIGNALS_PER_RUN:
            return True
        if not self.bounded:
            return False
        info = workflow.info()
        return (
            info.get_current_history_size() >= HANDOVER_HISTORY_BYTES
            or info.get_current_history_length() >= HANDOVER_HISTORY_EVENTS
        )

    def upgrade_due(self) -> bool:
        """Temporal says the task queue's target build is no longer this run's (a deploy
        made a newer build current), and this run is not already the one a move from
        this same build landed on."""
        if not workflow.info().is_target_worker_deployment_version_changed():
            return False
        return build_of_this_run() != self._state.upgraded_from

    def record_upgrade(self) -> None:
        build = build_of_this_run()
        self._ledger.audit("upgraded", actor="parley", detail={"from_build": build})
        self._state.upgraded_from = build


def build_of_this_run() -> str | None:
    """``<deployment>:<build id>`` of the worker running this task; None if unversioned."""
    version = workflow.info().get_current_deployment_version()
    if version is None or not version.deployment_name:
        return None
    return f"{version.deployment_name}:{version.build_id}"
