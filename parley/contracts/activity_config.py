"""Every activity's timeouts and retry policy, as plain data both sides read: the
workflow spreads them into ``workflow.execute_activity`` (``**MODEL_ACTIVITY.options(
summary=...)``, one way at every call site), the worker's activities read their retry
policy's cap for a server's ``Retry-After`` (:func:`retry_delay`) and their heartbeat
interval.

Workflow-safe: timedeltas and a ``RetryPolicy``, no I/O and no environment. None of these
is tunable by the environment today; one that becomes so is read by
``parley.config.settings`` and reaches the workflow in its input, never by import.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TypedDict

from temporalio.common import RetryPolicy


class ActivityOptions(TypedDict, total=False):
    """The keyword arguments :meth:`ActivityConfig.options` gives ``execute_activity``
    (:meth:`ActivityConfig.local_options`: ``execute_local_activity``)."""

    start_to_close_timeout: timedelta
    heartbeat_timeout: timedelta
    retry_policy: RetryPolicy
    summary: str


@dataclass(frozen=True)
class ActivityConfig:
    """One activity's options: how long an attempt may run, how often it is retried,
    and (for one that heartbeats every :data:`HEARTBEAT_INTERVAL`) how soon a worker
    that died is noticed and the call retried on another."""

    start_to_close: timedelta
    retry: RetryPolicy
    heartbeat: timedelta | None = None

    def options(self, *, summary: str) -> ActivityOptions:
        """The options of one call, with its ``summary``: what the Temporal UI shows for
        it (user metadata, not compared on replay). Short: it is history on every call."""
        options = ActivityOptions(
            start_to_close_timeout=self.start_to_close,
            retry_policy=self.retry,
            summary=summary,
        )
        if self.heartbeat is not None:
            options["heartbeat_timeout"] = self.heartbeat
        return options

    def local_options(self, *, summary: str) -> ActivityOptions:
        """The options of one call as a local activity (``execute_local_activity``): for
        a step of milliseconds on the worker that runs the workflow task; it cannot
        heartbeat."""
        assert self.heartbeat is None, "a local activity cannot heartbeat"
        return ActivityOptions(
            start_to_close_timeout=self.start_to_close, retry_policy=self.retry, summary=summary
        )


HEARTBEAT_INTERVAL = timedelta(seconds=3)
HEARTBEAT_TIMEOUT = timedelta(seconds=15)

MODEL_ACTIVITY = ActivityConfig(
    start_to_close=timedelta(minutes=3),
    heartbeat=HEARTBEAT_TIMEOUT,
    # Provider SDK retries are off (max_retries=0): this policy is the only retry loop.
    # Rate limits and overloads clear in tens of seconds, hence the long maximum interval;
    # a Retry-After from the provider overrides the interval through next_retry_delay.
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=8,
    ),
)

TOOL_ACTIVITY = ActivityConfig(
    start_to_close=timedelta(minutes=5),
    heartbeat=HEARTBEAT_TIMEOUT,
    # Bounded so that a backend that stays down fails the turn instead of hanging it;
    # business errors are non-retryable and go back to the model at once. No
    # non_retryable_error_types list: every failure is raised with non_retryable set
    # (activities/*: tool_failure, _model_failure), and the list would cost ~100 bytes
    # of history on every scheduled activity.
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=5,
    ),
)

CANONICAL_ARGS_ACTIVITY = ActivityConfig(
    # Pure validation on the worker, milliseconds: a short timeout, a few retries for a
    # worker that dies; arguments that do not fit are non-retryable and refuse the edit.
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5),
)

INVERSE_ACTIVITY = ActivityConfig(
    # A call's inverse from the worker's registry: pure, milliseconds (a local activity).
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5),
)

JUDGE_ACTIVITY = ActivityConfig(
    # One model call, bounded inside the activity (``JUDGE_TIMEOUT_SECONDS`` in
    # ``parley.contracts.judging``): a judge that
    # does not answer is doubt, not a failure. Retried only for a worker that died.
    start_to_close=timedelta(minutes=3),
    retry=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=3),
)

PREVIEW_ACTIVITY = ActivityConfig(
    # A tool's preview reads its target (a remote, a REST backend): it runs with the
    # tool's own bound (``PREVIEW_TIMEOUT_SECONDS`` in ``parley.tools``, under this
    # timeout). The activity retries a transient failure of the tool (a 503, a timeout)
    # on its first attempts and reports it as a failed preview on its last: a preview
    # never fails the activity, and never holds a decision for long.
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=3,
    ),
)

NOTIFY_ACTIVITY = ActivityConfig(
    start_to_close=timedelta(seconds=30),
    # A reviewer's webhook may be down for a while: keep trying for about an hour, then
    # record the failure in the audit log (the conversation does not depend on it).
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(minutes=10),
        maximum_attempts=10,
    ),
)

ARCHIVE_AUDIT_ACTIVITY = ActivityConfig(
    # One write to the payload store. Bounded, so that a store that is down does not
    # hold the run loop (deadlines, continue-as-new): the entries stay in the window
    # and the next batch tries again.
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=6),
)

STORE_GC_ACTIVITY = ActivityConfig(
    # A large store takes a while to list; a failed sweep is retried a few times, then
    # the next scheduled one tries again.
    start_to_close=timedelta(hours=1),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=10),
        maximum_interval=timedelta(minutes=5),
        maximum_attempts=3,
    ),
)


def model_summary(model: str | None, subagent: str | None = None, *, compact: bool = False) -> str:
    """A model call's summary: the model it asked for (``default``: the worker's first
    listed) and the subagent it is for, e.g. ``anthropic:claude-x for review-1``."""
    text = f"{'compact with ' if compact else ''}{model or 'default model'}"
    return f"{text} for {subagent}" if subagent else text


def retry_delay(retry_after: float | None, config: ActivityConfig) -> timedelta | None:
    """The server's ``Retry-After`` as Temporal's next retry delay, capped at the policy's
    maximum interval: a header asking for a day must not hold a turn for a day."""
    if not retry_after or retry_after <= 0:
        return None
    cap = config.retry.maximum_interval or timedelta(seconds=60)
    return min(timedelta(seconds=retry_after), cap)
