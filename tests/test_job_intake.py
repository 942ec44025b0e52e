"""The handlers' prologue (``parley.workflows.intake``) and the per-run counts it feeds
(``handover``): every update and every signal is counted once, ``stream_delta``
included; an update's input is parsed strictly and its sender checked before the
handler runs; a retried update id gets its first result. No server: the prologue runs
on a small class of handlers over a plain state, with a stand-in for the workflow API.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from temporalio import workflow

from parley.contracts import (
    ConversationSnapshot,
    EndInput,
    EventsWait,
    RememberedDecision,
    SendMessageInput,
    StreamDelta,
    TurnResult,
    UndoResult,
)
from parley.contracts.errors import InvalidMessage, NotOwner
from parley.workflows import intake
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.lifecycle.handover import SIGNALS_PER_RUN, UPDATES_PER_RUN, Handover
from tests.support.fake_workflow import FakeWorkflow, context, install


class Handlers:
    """Handlers with the prologue, as ``ConversationWorkflow`` declares its own."""

    def __init__(self, reviewers: list[str] | None = None) -> None:
        view, records = context(reviewers=reviewers or [])
        self.handover = Handover(view.state, view.start, records.ledger)
        self.dedup = records.dedup
        self._intake = intake.Intake(view.state, self.handover, records.dedup)
        self.ran: list[Any] = []

    @intake.update(intake.SEND)
    async def send(self, message: SendMessageInput) -> TurnResult:
        self.ran.append(message)
        return self.dedup.remember(TurnResult(status="completed", reply=message.text))

    @intake.validator(intake.SEND)
    def validate_send(self, message: SendMessageInput) -> None:
        self.ran.append(("validated", message.text))

    @intake.update(intake.END)
    def end(self, request: EndInput) -> ConversationSnapshot | None:
        self.ran.append(request)
        return None

    @intake.update(intake.WAIT_FOR_EVENTS)
    async def wait(self, request: EventsWait) -> int:
        return request.after

    @intake.signal()
    def upgrade(self) -> None:
        self.ran.append("upgrade")

    @intake.signal(stream=True)
    def stream_delta(self, delta: StreamDelta) -> None:
        self.ran.append(delta.sequence)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeWorkflow:
    return install(monkeypatch)


def send(text: str, user: str = "alice") -> dict[str, Any]:
    return {"text": text, "user_id": user, "message_id": f"m-{text}"}


async def test_every_update_and_signal_is_counted_once_validators_not(fake: FakeWorkflow) -> None:
    handlers = Handlers()
    handlers.validate_send(send("hi"))
    await handlers.send(send("hi"))
    handlers.end({"user_id": "alice"})
    assert await handlers.wait({"user_id": "alice", "after": 3}) == 3
    handlers.upgrade()
    for sequence in (1, 2, 3):
        handlers.stream_delta(StreamDelta(message_id="a", sequence=sequence, text="x"))

    counts = handlers.handover
    assert (counts.updates, counts.signals, counts.stream_signals) == (3, 4, 3)
    assert handlers.ran[0] == ("validated", "hi") and handlers.ran[-4:] == ["upgrade", 1, 2, 3]


async def test_the_input_is_parsed_strictly_and_its_sender_checked(fake: FakeWorkflow) -> None:
    handlers = Handlers(reviewers=["bob"])
    with pytest.raises(InvalidMessage, match=r"SendMessageInput refused: .*tone"):
        await handlers.send({**send("hi"), "tone": "loud"})
    with pytest.raises(NotOwner):
        await handlers.send(send("hi", user="bob"))  # a reviewer reads, never sends
    with pytest.raises(NotOwner):
        handlers.validate_send(send("hi", user="mallory"))
    assert await handlers.wait({"user_id": "bob", "after": 1}) == 1  # a member follows
    with pytest.raises(NotOwner):
        await handlers.wait({"user_id": "mallory", "after": 1})
    assert handlers.ran == [] and handlers.handover.updates == 4  # refused ones count too


async def test_a_retried_update_id_gets_its_first_result_without_running_again(
    fake: FakeWorkflow,
) -> None:
    handlers = Handlers()
    fake.update_id = "u1"
    first = await handlers.send(send("first"))
    again = await handlers.send(send("second"))
    assert again is first and [m.text for m in handlers.ran] == ["first"]
    fake.update_id = "u2"
    assert (await handlers.send(send("third"))).reply == "third"


def test_temporal_sees_the_raw_input_and_the_handlers_own_result_type() -> None:
    """The prologue parses: Temporal decodes the payload as ``Any`` and encodes the
    handler's result type, as before; a signal keeps its own argument types."""
    hints = typing.get_type_hints(Handlers.send)
    assert hints == {"raw": Any, "return": TurnResult}
    assert typing.get_type_hints(Handlers.stream_delta)["delta"] is StreamDelta
    definition = workflow._Definition.must_from_class(ConversationWorkflow)
    updates = {name: (u.arg_types, u.ret_type) for name, u in definition.updates.items()}
    assert updates == {
        "send_message": ([Any], TurnResult),
        "decide": ([Any], TurnResult),
        "end": ([Any], ConversationSnapshot),
        "rewind": ([Any], ConversationSnapshot),
        "wait_for_events": ([Any], int),
        "undo": ([Any], UndoResult),
        "revert": ([Any], TurnResult),
        "revoke_grant": ([Any], RememberedDecision),
    }
    signals = {name: s.arg_types for name, s in definition.signals.items()}
    assert signals["stream_delta"] == [StreamDelta] and signals["upgrade"] == []
    assert set(signals) == {
        "upgrade",
        "decide_signal",
        "stream_delta",
        "subagent_report",
        "subagent_window",
        "undo_signal",
    }
    # Each handler and validator begins with the prologue.
    handlers = [*definition.updates.values(), *definition.signals.values()]
    assert {h.fn.__code__.co_filename for h in handlers} == {intake.__file__}
    assert {u.validator.__code__.co_filename for u in definition.updates.values()} == {  # type: ignore[union-attr]
        intake.__file__
    }


def test_a_run_before_the_bounded_handover_hands_over_on_its_other_signals_only(
    fake: FakeWorkflow,
) -> None:
    """Every signal is counted; a run recorded before ``bounded-history-handover``
    still hands over as it did: on its signals but ``stream_delta``."""
    view, records = context()
    handover = Handover(view.state, view.start, records.ledger)
    for _ in range(SIGNALS_PER_RUN):
        handover.count_signal(stream=True)
    assert handover.signals == SIGNALS_PER_RUN and not handover.pressing()
    handover.bounded = True  # recorded under the patch: Temporal's count, every signal
    assert handover.pressing()

    old = Handover(view.state, view.start, records.ledger)
    for _ in range(SIGNALS_PER_RUN):
        old.count_signal()
    assert old.pressing()
    many = Handover(view.state, view.start, records.ledger)
    for _ in range(UPDATES_PER_RUN):
        many.count_update()
    assert many.pressing() and many.followers_refused is False
