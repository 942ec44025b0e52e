"""Messages while the model is thinking: ``reject`` (the default), ``enqueue`` and
``interrupt``, each with messages racing a slow model (``HeldModel``,
a scripted model at the model boundary that sleeps until released) through a real
worker and Temporal. No message is lost or applied twice: the transcript and the audit
log hold each once; ``interrupt`` cancels a model call, never a running tool."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.client import Client

from parley.client import ConversationRefused, Conversations
from parley.contracts import ConversationSnapshot, ConversationState, SendMessageInput
from parley.contracts.busy import QUEUED_MESSAGES_MAX, QueuedMessage
from parley.contracts.errors import ConversationEnded, ErrorType, MessageTooLarge, TurnInProgress
from parley.contracts.names import INTERRUPTED_EVENT
from parley.contracts.payloads import PAYLOAD_CONTEXT
from parley.storage import LocalFileStorageDriver
from parley.workflows.rules import gate
from parley.workflows.turn.streaming import INTERRUPTED
from tests.support import GATE, SLOW_STARTED, call, registry
from tests.support.cli import assert_one_line_error, parley
from tests.support.gateway import ALICE_TOKEN, SseEvent, auth, serve_gateway, sse_events
from tests.support.held_model import HeldModel
from tests.support.processes import cli_env
from tests.support.transcripts import new_session, runs_in, tool_messages
from tests.support.waiting import eventually

ALICE = auth(ALICE_TOKEN)
SSE = {"Accept": "text/event-stream"}


async def audit_of(conv: Conversations, sid: str, user: str) -> list[tuple[str, dict]]:
    snapshot = await conv.state(sid, user)
    return [(a.event, a.detail or {}) for a in snapshot.audit]


def humans(snapshot: ConversationSnapshot) -> list[str]:
    return [str(m.content) for m in snapshot.transcript if isinstance(m, HumanMessage)]


def applied_once(audit: list[tuple[str, dict]], message_ids: list[str]) -> None:
    """Each message entered the conversation exactly once (audited ``message`` once)."""
    applied = Counter(d["message_id"] for event, d in audit if event == "message")
    assert applied == Counter(message_ids), applied


async def events_of(conv: Conversations, sid: str, user: str) -> list[dict]:
    return [item.event for item in (await conv.events(sid, user)).events]


async def test_enqueued_messages_racing_a_slow_model_each_become_the_next_turn(
    parley_worker,
) -> None:
    model = HeldModel(held=[0])
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "ida", "A", message_id="a"))
        await eventually(lambda: model.calls, what="the first model call")
        racing = [
            asyncio.create_task(conv.send(sid, "ida", text, message_id=text, while_busy="enqueue"))
            for text in ("B", "C")
        ]

        async def both_queued() -> bool:
            audit = await audit_of(conv, sid, "ida")
            return sum(event == "enqueued" for event, _ in audit) == 2

        await eventually(both_queued, what="both messages queued")
        assert not any(task.done() for task in racing)  # they wait for their turns
        model.release(0)
        a, b, c = await asyncio.gather(first, *racing)

        assert (a.reply, b.reply, c.reply) == ("re: A", "re: B", "re: C")
        assert [h for call in model.calls for h in call.humans] in (
            ["A", "B", "C"],
            ["A", "C", "B"],
        )
        assert not any(call.cancelled for call in model.calls)
        snapshot = await conv.state(sid, "ida")
        audit = await audit_of(conv, sid, "ida")
        queued_order = [d["message_id"] for event, d in audit if event == "enqueued"]
        assert humans(snapshot) == ["A", *queued_order]  # in the order they were queued
        assert [str(m.content) for m in snapshot.transcript if isinstance(m, AIMessage)] == [
            "re: A",
            *(f"re: {m}" for m in queued_order),
        ]
        applied_once(audit, ["a", "B", "C"])
        assert snapshot.counters.turns == 3
        # The same message sent again (a client retry) gets its first result, once.
        again = await conv.send(sid, "ida", "B", message_id="B", while_busy="enqueue")
        assert again.reply == "re: B"
        assert humans(await conv.state(sid, "ida")) == humans(snapshot)


async def test_interrupting_messages_cancel_the_model_call_and_join_the_turn(
    parley_worker,
) -> None:
    model = HeldModel(held=[0, 1], opening="Thinking about ")
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "uma", "A", message_id="a"))

        async def streaming() -> bool:
            events = await events_of(conv, sid, "uma")
            return any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events)

        await eventually(lambda: model.calls, what="the first model call")
        await eventually(streaming, what="the first call's text streaming")
        second = asyncio.create_task(
            conv.send(sid, "uma", "B", message_id="b", while_busy="interrupt")
        )
        await eventually(lambda: len(model.calls) == 2, what="a new call after the interrupt")
        assert model.calls[1].humans == ["A", "B"]
        third = asyncio.create_task(
            conv.send(sid, "uma", "C", message_id="c", while_busy="interrupt")
        )
        a, b, c = await asyncio.gather(first, second, third)

        assert model.calls[2].humans == ["A", "B", "C"]
        assert a.reply == b.reply == c.reply == "re: A + B + C"
        assert [call.answered for call in model.calls] == [False, False, True]
        # The activity's heartbeat brings it the cancel (it is never left running).
        await eventually(
            lambda: model.calls[0].cancelled and model.calls[1].cancelled,
            what="both interrupted calls cancelled in the worker",
        )
        snapshot = await conv.state(sid, "uma")
        assert humans(snapshot) == ["A", "B", "C"]
        replies = [m for m in snapshot.transcript if isinstance(m, AIMessage)]
        assert [str(m.content) for m in replies] == ["re: A + B + C"]
        audit = await audit_of(conv, sid, "uma")
        applied_once(audit, ["a", "b", "c"])
        interrupted = [d for event, d in audit if event == "interrupted"]
        assert [d["message_ids"] for d in interrupted] == [["b"], ["c"]]
        assert [d["message_id"] for event, d in audit if event == "enqueued"] == ["b", "c"]
        events = await events_of(conv, sid, "uma")
        discarded = [e["value"] for e in events if e.get("name") == "parley.stream_discarded"]
        assert discarded and all(d["reason"] == INTERRUPTED for d in discarded)
        assert [e["value"] for e in events if e.get("name") == INTERRUPTED_EVENT] == [
            {"messageIds": ["b"]},
            {"messageIds": ["c"]},
        ]
        # The streamed text of the reply that stands adds up to it; runs stay whole.
        kept = replies[0].id
        text = "".join(
            e["delta"]
            for e in events
            if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == kept
        )
        assert text == "re: A + B + C"
        kinds = [e["type"] for e in events]
        assert kinds.count("RUN_STARTED") == kinds.count("RUN_FINISHED") == 1


async def test_an_interrupt_never_cancels_a_running_tool(parley_worker) -> None:
    GATE.clear()
    SLOW_STARTED.clear()
    model = HeldModel(replies=[{"content": "", "tool_calls": [call("slow_read", "r1")]}])
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "eli", "read slowly", message_id="a"))
        await SLOW_STARTED.wait()  # the tool runs
        second = asyncio.create_task(
            conv.send(sid, "eli", "and B", message_id="b", while_busy="interrupt")
        )

        async def queued() -> bool:
            return any(event == "enqueued" for event, _ in await audit_of(conv, sid, "eli"))

        await eventually(queued, what="the interrupting message queued")
        assert len(model.calls) == 1 and not second.done()
        GATE.set()  # the tool completes
        a, b = await asyncio.gather(first, second)

        assert a == b and a.reply == "re: and B"
        assert [r.tool_call_id for r in a.results] == ["r1"]
        assert len(runs_in(sid, "slow_read")) == 1
        assert not any(call.cancelled for call in model.calls)
        assert model.calls[1].messages[-2:] == ["ToolMessage", "HumanMessage"]
        snapshot = await conv.state(sid, "eli")
        assert tool_messages(snapshot.transcript).keys() == {"r1"}
        audit = await audit_of(conv, sid, "eli")
        applied_once(audit, ["a", "b"])
        assert not [event for event, _ in audit if event == "interrupted"]
        assert sum(event == "ran" for event, _ in audit) == 1


async def test_reject_is_the_default_and_a_conversation_default_applies(parley_worker) -> None:
    model = HeldModel(held=[0, 1])
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "ros", "A", message_id="a"))
        await eventually(lambda: model.calls, what="the first model call")
        with pytest.raises(ConversationRefused) as refused:
            await conv.send(sid, "ros", "B", message_id="b")
        assert refused.value.error_type == ErrorType.TURN_IN_PROGRESS
        assert "\n" not in refused.value.message and "enqueue" in refused.value.message
        model.release(0)
        assert (await first).reply == "re: A"
        audit = await audit_of(conv, sid, "ros")
        applied_once(audit, ["a"])

    # A conversation started by a client whose setting is ``enqueue`` queues by default,
    # up to the bound; past it the message is refused in one line.
    model = HeldModel(held=[0])
    async with parley_worker(registry(), model, while_busy="enqueue") as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "ros", "A", message_id="a"))
        await eventually(lambda: model.calls, what="the first model call")
        queued = []
        for n in range(QUEUED_MESSAGES_MAX):
            queued.append(asyncio.create_task(conv.send(sid, "ros", f"Q{n}", message_id=f"q{n}")))

            async def waiting(count: int = n + 1) -> bool:
                audit = await audit_of(conv, sid, "ros")
                return sum(event == "enqueued" for event, _ in audit) == count

            await eventually(waiting, what=f"{n + 1} messages queued")
        with pytest.raises(ConversationRefused) as refused:
            await conv.send(sid, "ros", "one too many", message_id="over")
        assert refused.value.error_type == ErrorType.TURN_IN_PROGRESS
        assert f"at most {QUEUED_MESSAGES_MAX}" in refused.value.message
        model.release(0)
        results = await asyncio.gather(first, *queued)
        assert [r.reply for r in results] == ["re: A", *(f"re: Q{n}" for n in range(4))]
        applied_once(await audit_of(conv, sid, "ros"), ["a", *(f"q{n}" for n in range(4))])


async def test_ending_refuses_the_queued_messages_and_records_it(parley_worker) -> None:
    model = HeldModel(held=[0])
    async with parley_worker(registry(), model) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "kai", "A", message_id="a"))
        await eventually(lambda: model.calls, what="the first model call")
        queued = asyncio.create_task(
            conv.send(sid, "kai", "B", message_id="b", while_busy="enqueue")
        )

        async def is_queued() -> bool:
            return any(event == "enqueued" for event, _ in await audit_of(conv, sid, "kai"))

        await eventually(is_queued, what="the message queued")
        ending = asyncio.create_task(conv.end(sid, "kai"))
        model.release(0)
        assert (await first).reply == "re: A"
        await ending
        with pytest.raises(ConversationRefused) as refused:
            await queued
        assert refused.value.error_type == ErrorType.CONVERSATION_ENDED
        assert "was not applied" in refused.value.message
        snapshot = await conv.state(sid, "kai")
        assert humans(snapshot) == ["A"]
        unqueued = [d for event, d in await audit_of(conv, sid, "kai") if event == "unqueued"]
        assert [d["message_id"] for d in unqueued] == ["b"]


async def test_the_gateway_takes_while_busy_per_message(parley_worker) -> None:
    """``while_busy`` in the body of ``POST …/messages``: an enqueued message answers its
    own turn's result; an interrupting one streams the run that answers it (AG-UI);
    a mode that does not exist is refused in one line."""
    model = HeldModel(held=[0, 1])
    async with (
        parley_worker(registry(), model) as conv,
        serve_gateway(conv) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        url = f"/v1/conversations/{sid}/messages"
        first = asyncio.create_task(
            http.post(url, json={"text": "A", "message_id": "a"}, headers=ALICE)
        )
        await eventually(lambda: model.calls, what="the first model call")
        bad = await http.post(url, json={"text": "B", "while_busy": "later"}, headers=ALICE)
        assert bad.status_code == 422 and "while_busy" in bad.json()["error"]["message"]
        busy = await http.post(url, json={"text": "B"}, headers=ALICE)
        assert busy.status_code == 409 and busy.json()["error"]["type"] == "TurnInProgress"

        async def interrupt() -> list[SseEvent]:
            body = {"text": "B", "message_id": "b", "while_busy": "interrupt"}
            async with http.stream("POST", url, json=body, headers={**ALICE, **SSE}) as stream:
                assert stream.status_code == 200
                return [event async for event in sse_events(stream)]

        interrupting = asyncio.create_task(interrupt())
        await eventually(lambda: len(model.calls) == 2, what="a new call after the interrupt")
        enqueued = asyncio.create_task(
            http.post(
                url, json={"text": "C", "message_id": "c", "while_busy": "enqueue"}, headers=ALICE
            )
        )

        async def queued() -> bool:
            audit = await audit_of(conv, sid, "alice")
            return sum(event == "enqueued" for event, _ in audit) == 2

        await eventually(queued, what="the enqueued message waiting")
        model.release(1)
        a, streamed, c = await asyncio.gather(first, interrupting, enqueued)
        assert a.json()["reply"] == "re: A + B"
        assert c.json()["reply"] == "re: C"
        assert streamed[-1].type == "RUN_FINISHED"
        text = "".join(e.data["delta"] for e in streamed if e.type == "TEXT_MESSAGE_CONTENT")
        assert text == "re: A + B"  # the run that answered B, replayed to its stream
        applied_once(await audit_of(conv, sid, "alice"), ["a", "b", "c"])
        assert humans(await conv.state(sid, "alice")) == ["A", "B", "C"]


async def test_parley_send_takes_while_busy(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    """The console script: ``--while-busy enqueue`` prints the reply of the turn that
    answers it; without it the message is refused in one line."""
    model = HeldModel(held=[0])
    queue = f"parley-busy-{uuid.uuid4().hex[:8]}"
    async with parley_worker(registry(), model, task_queue=queue) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "cli", "A", message_id="a"))
        await eventually(lambda: model.calls, what="the first model call")
        env = cli_env(client, payload_store, queue)
        refused = await asyncio.to_thread(parley, env, "send", "-s", sid, "-u", "cli", "B")
        assert_one_line_error(refused, "a turn is still running")
        send = ["send", "-s", sid, "-u", "cli", "--message-id", "b", "--while-busy", "enqueue"]
        queued = asyncio.create_task(asyncio.to_thread(parley, env, *send, "--json", "B"))

        async def waiting() -> bool:
            return any(event == "enqueued" for event, _ in await audit_of(conv, sid, "cli"))

        await eventually(waiting, what="the message queued")
        model.release(0)
        assert (await first).reply == "re: A"
        result = await queued
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["reply"] == "re: B"
        applied_once(await audit_of(conv, sid, "cli"), ["a", "b"])


async def test_queued_messages_run_before_the_run_hands_over(parley_worker) -> None:
    """With a hand-over due after every turn, the queue is emptied first (its updates
    belong to the run), then the run continues as new; nothing is lost or repeated."""
    model = HeldModel(held=[0])
    async with parley_worker(registry(), model, continue_as_new_after_events=1) as conv:
        sid = new_session()
        first = asyncio.create_task(conv.send(sid, "noa", "A", message_id="a"))
        await eventually(lambda: model.calls, what="the first model call")
        racing = [
            asyncio.create_task(conv.send(sid, "noa", text, message_id=text, while_busy="enqueue"))
            for text in ("B", "C")
        ]

        async def both_queued() -> bool:
            audit = await audit_of(conv, sid, "noa")
            return sum(event == "enqueued" for event, _ in audit) == 2

        await eventually(both_queued, what="both messages queued")
        model.release(0)
        results = await asyncio.gather(first, *racing)
        assert sorted(r.reply for r in results) == ["re: A", "re: B", "re: C"]

        async def handed_over() -> ConversationSnapshot | None:
            snapshot = await conv.state(sid, "noa")
            return snapshot if snapshot.counters.continued_as_new >= 1 else None

        snapshot = await eventually(handed_over, what="the run continued as new")
        assert sorted(humans(snapshot)) == ["A", "B", "C"]
        applied_once(await audit_of(conv, sid, "noa"), ["a", "B", "C"])
        d = await conv.send(sid, "noa", "D", message_id="d", while_busy="enqueue")
        assert d.reply == "re: D"  # nothing queued any more: an ordinary turn


def test_the_queue_is_carried_state_in_the_flat_wire_shape() -> None:
    queued = QueuedMessage(
        update_id="message-b",
        message_id="b",
        text="B",
        user_id="ida",
        while_busy="interrupt",
        queued_at=datetime(2026, 12, 4, tzinfo=UTC),
    )
    state = ConversationState(session_id="s", user_id="ida", queued_messages=[queued])
    wire = state.model_dump(mode="json", context=PAYLOAD_CONTEXT)
    assert wire["queued_messages"][0]["update_id"] == "message-b"
    assert ConversationState.model_validate(wire).queued_messages == [queued]
    empty = ConversationState(session_id="s", user_id="ida")
    assert "queued_messages" not in empty.model_dump(mode="json", context=PAYLOAD_CONTEXT)


def test_the_gate_says_which_messages_wait() -> None:
    """``gate.check_message`` without a server: while a turn runs, reject refuses in one
    line naming the other modes, enqueue and interrupt wait up to the bound; a message
    never waits on an ended conversation, nor jumps a queue that waits."""
    state = ConversationState(session_id="s", user_id="ida", turn_running=True)

    def message(mode: str | None) -> SendMessageInput:
        return SendMessageInput(text="hi", message_id="m", user_id="ida", while_busy=mode)

    with pytest.raises(TurnInProgress, match="while_busy enqueue") as refused:
        gate.check_message(state, message(None), 1_000)
    assert "\n" not in str(refused.value)
    assert gate.check_message(state, message("enqueue"), 1_000, while_busy="enqueue")
    assert gate.check_message(state, message("interrupt"), 1_000, while_busy="interrupt")
    with pytest.raises(MessageTooLarge):  # every other check still holds
        gate.check_message(state, message("enqueue"), 1, while_busy="enqueue")
    queued = QueuedMessage(
        update_id="u",
        message_id="q",
        text="q",
        user_id="ida",
        while_busy="enqueue",
        queued_at=datetime(2026, 12, 4, tzinfo=UTC),
    )
    state.queued_messages = [queued] * QUEUED_MESSAGES_MAX
    with pytest.raises(TurnInProgress, match=f"at most {QUEUED_MESSAGES_MAX}"):
        gate.check_message(state, message("enqueue"), 1_000, while_busy="enqueue")
    state.turn_running, state.queued_messages = False, [queued]
    with pytest.raises(TurnInProgress, match="queued message"):  # no jumping the queue
        gate.check_message(state, message(None), 1_000)
    assert gate.check_message(state, message("enqueue"), 1_000, while_busy="enqueue")
    state.ended = True
    with pytest.raises(ConversationEnded):
        gate.check_message(state, message("enqueue"), 1_000, while_busy="enqueue")
