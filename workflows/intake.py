"""The handlers' shared prologue: one table of what each update takes and who may send it,
and the decorators that run it. Workflow side (deterministic: it counts, parses and
checks; nothing here issues a command).

Every update and every signal of ``ConversationWorkflow`` is counted as it arrives, once,
toward the run's limits (``handover``; ``stream_delta`` included: Temporal's limit counts
every signal). An update's input is then parsed strictly (``gate.parse``: anything that
does not fit is the handler's refusal, never a retryable converter failure), its sender
checked (the owner, a decider, or a member: ``gate``), and a retried update id gets the
result it had the first time (``dedup``), before the handler runs. A validator runs the
same parse and check, uncounted: a refused update never enters history. A signal that
does not carry what its handler takes (anyone may send one) is dropped.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel
from temporalio import workflow

from parley.contracts import (
    ConversationState,
    DecideInput,
    EndInput,
    EventsWait,
    RevertInput,
    SendMessageInput,
    UndoInput,
)
from parley.contracts.conversation import RewindInput
from parley.contracts.errors import InvalidDecision, InvalidMessage, Refusal
from parley.contracts.grants import RevokeGrantInput
from parley.workflows.lifecycle.handover import Handover
from parley.workflows.record.dedup import Deduplication
from parley.workflows.rules import gate


class Admission(NamedTuple):
    """What an update takes (``model``, else ``refusal``), who may send it, and whether
    a retried update id is answered with its first result (``replay``)."""

    model: type[BaseModel]
    refusal: type[Refusal]
    who: Literal["owner", "decider", "member"]
    replay: bool = False


#: The table: one row per update of ``ConversationWorkflow``.
SEND = Admission(SendMessageInput, InvalidMessage, "owner", replay=True)
DECIDE = Admission(DecideInput, InvalidDecision, "decider", replay=True)
END = Admission(EndInput, InvalidMessage, "owner")
REWIND = Admission(RewindInput, InvalidMessage, "owner")
WAIT_FOR_EVENTS = Admission(EventsWait, InvalidMessage, "member")
UNDO = Admission(UndoInput, InvalidDecision, "member")
REVERT = Admission(RevertInput, InvalidDecision, "member")
REVOKE_GRANT = Admission(RevokeGrantInput, InvalidDecision, "member")


class Intake:
    """The prologue's state: the run's counts and the results by update id. ``view`` is
    read only."""

    def __init__(self, view: ConversationState, handover: Handover, dedup: Deduplication):
        self._view, self._handover, self._dedup = view, handover, dedup

    def check(self, spec: Admission, raw: Any) -> Any:
        """The input, parsed strictly; its sender checked."""
        request: Any = gate.parse(spec.model, raw, spec.refusal)
        if spec.who == "owner":
            gate.check_owner(self._view, request.user_id)
        elif spec.who == "decider":
            gate.check_decider(self._view, request)
        else:
            gate.check_member(self._view, request.user_id, request.groups)
        return request

    def take(self, spec: Admission, raw: Any) -> Any:
        """An update arrives: counted, then checked."""
        self._handover.count_update()
        return self.check(spec, raw)

    def replayed(self, spec: Admission) -> Any:
        """The result this update id had already (None: none, or no replay for it)."""
        return self._dedup.earlier() if spec.replay else None

    def count_signal(self, *, stream: bool) -> None:
        self._handover.count_signal(stream=stream)


def _as_handler(wrapper: Any, fn: Callable[..., Any]) -> Any:
    """``wrapper`` named as ``fn``, taking the raw input (Temporal reads the signature
    for the payload's type: ``Any``, so that the parse above is the one that refuses)."""
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, name, getattr(fn, name))
    wrapper.__annotations__ = {"raw": Any, "return": typing.get_type_hints(fn).get("return")}
    return wrapper


def update(spec: Admission) -> Callable[[Callable[..., Any]], Any]:
    """The prologue of an update handler, which then gets the parsed input."""

    def wrap(fn: Callable[..., Any]) -> Any:
        if inspect.iscoroutinefunction(fn):

            async def handler(self: Any, raw: Any) -> Any:
                request = self._intake.take(spec, raw)
                if (replayed := self._intake.replayed(spec)) is not None:
                    return replayed
                return await fn(self, request)

            return _as_handler(handler, fn)

        def sync_handler(self: Any, raw: Any) -> Any:
            request = self._intake.take(spec, raw)
            if (replayed := self._intake.replayed(spec)) is not None:
                return replayed
            return fn(self, request)

        return _as_handler(sync_handler, fn)

    return wrap


def validator(spec: Admission) -> Callable[[Callable[..., None]], Any]:
    """The prologue of an update's validator (uncounted), which then gets the parsed input."""

    def wrap(fn: Callable[..., None]) -> Any:
        def check(self: Any, raw: Any) -> None:
            fn(self, self._intake.check(spec, raw))

        return _as_handler(check, fn)

    return wrap


def signal(*, stream: bool = False) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The prologue of a signal handler: counted (``stream``: a ``stream_delta`` batch),
    then dropped, with a warning, unless it carries what the handler takes. A signal has
    no validator and anyone with the Temporal client may send one: ``null``, no
    argument or two would otherwise fail every workflow task of the run from then on
    (Temporal passes them as they are when their count does not fit the handler's)."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        takes = _signal_arguments(fn)

        @functools.wraps(fn)
        def handler(self: Any, *args: Any) -> None:
            self._intake.count_signal(stream=stream)
            problem = _misfit(takes, args)
            if problem:
                workflow.logger.warning("dropped a %s signal: %s", fn.__name__, problem)
                return
            fn(self, *args)

        return handler

    return wrap


def _signal_arguments(fn: Callable[..., None]) -> list[Any]:
    """The type of each argument a signal handler takes after ``self``."""
    hints = typing.get_type_hints(fn)
    names = list(inspect.signature(fn).parameters)[1:]
    return [hints.get(name, Any) for name in names]


def _misfit(takes: list[Any], args: tuple[Any, ...]) -> str:
    """Why ``args`` are not what a handler taking ``takes`` can be given ('' if they are)."""
    if len(args) != len(takes):
        return f"it carries {len(args)} arguments, the handler takes {len(takes)}"
    for arg, kind in zip(args, takes, strict=True):
        if isinstance(kind, type) and issubclass(kind, BaseModel) and not isinstance(arg, kind):
            return f"it carries a {type(arg).__name__}, not a {kind.__name__}"
    return ""
