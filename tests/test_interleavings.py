"""Generated interleavings: hypothesis draws sequences of messages, decisions (valid,
stale, duplicated, concurrent, partial, from the wrong user, by update and by signal),
expiries and worker restarts, and plays each against the real workflow on the real dev
server. The model is a rule (the only fake); the tools are real and record every run.

After each sequence the conversation is ended and these are checked on its final
state, its audit log and the tools' side-effect log:

- no ``confirm`` tool ran without an approve or edit for its call id;
- no tool ran twice; every approved call ran exactly once;
- every tool call id has exactly one ToolMessage, and the transcript is one a provider
  accepts (each assistant message's calls answered before the next message);
- every input was either applied or refused with an error; a refused signal is in the
  audit log (``decision_refused``); nothing is dropped silently.

``PARLEY_INTERLEAVINGS=N`` sets the number of sequences (default 12 in CI);
``tests/RELIABILITY.md`` says how many were run and what they found.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import Decision
from parley.contracts.errors import ErrorType
from parley.contracts.names import workflow_id_for
from parley.worker.wiring import build_worker
from tests.support import RUNS, registry
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually

OWNER = "olive"
STRANGER = "mallory"
EXAMPLES = int(os.environ.get("PARLEY_INTERLEAVINGS", "12"))
EXPIRY_SECONDS = 6.0


class PlanModel(BaseChatModel):
    """Answers a message ``plan C A`` with C ``write_record`` (confirm) and A
    ``read_records`` (auto) calls, ids unique in the conversation; anything after tool
    results with text."""

    @property
    def _llm_type(self) -> str:
        return "parley-plan-rule"

    def bind_tools(self, tools: Any, **kwargs: Any) -> PlanModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        last = messages[-1]
        if isinstance(last, HumanMessage) and str(last.content).startswith("plan "):
            confirms, autos = (int(n) for n in str(last.content).split()[1:3])
            calls = [
                {"name": "write_record", "args": {"title": f"t{turn}-{n}"}, "id": f"a{turn}w{n}"}
                for n in range(confirms)
            ] + [{"name": "read_records", "args": {}, "id": f"a{turn}r{n}"} for n in range(autos)]
            message = AIMessage(content="", tool_calls=[{**c, "type": "tool_call"} for c in calls])
        else:
            message = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=message)])


ACTIONS = st.sampled_from(["approve", "edit", "reject", "respond"])
SEND = st.tuples(st.just("send"), st.integers(1, 2), st.integers(0, 1))
STEPS = st.one_of(
    SEND,
    st.tuples(st.just("send"), st.just(0), st.integers(0, 1)),
    st.tuples(st.just("decide"), st.lists(ACTIONS, min_size=1, max_size=3)),
    st.tuples(st.just("decide_stale")),
    st.tuples(st.just("decide_partial")),
    st.tuples(st.just("decide_wrong_user")),
    st.tuples(st.just("repeat_last_decision")),
    st.tuples(st.just("decide_concurrently")),
    st.tuples(st.just("signal"), st.lists(ACTIONS, min_size=1, max_size=3)),
    st.tuples(st.just("signal_stale")),
    st.tuples(st.just("signal_wrong_user")),
    st.tuples(st.just("restart_worker")),
    st.tuples(st.just("let_calls_expire")),
)


@dataclass
class Ledger:
    """What the test sent and what it was told."""

    #: tool_call_id -> action, for every decision an update answered with success.
    decided_by_update: dict[str, str] = field(default_factory=dict)
    signals: int = 0
    refused_updates: int = 0
    last_decisions: list[Decision] = field(default_factory=list)


def decisions_for(pending: list[str], actions: list[str]) -> list[Decision]:
    chosen = []
    for n, call_id in enumerate(pending):
        action = actions[n % len(actions)]
        if action == "edit":
            chosen.append(Decision(tool_call_id=call_id, action="edit", args={"title": "edited"}))
        elif action in ("reject", "respond"):
            chosen.append(Decision(tool_call_id=call_id, action=action, message="no, thanks"))
        else:
            chosen.append(Decision(tool_call_id=call_id, action="approve"))
    return chosen


async def play(client: Client, steps: list[tuple]) -> None:
    config = Settings(
        task_queue=f"parley-mix-{uuid.uuid4().hex[:8]}", pending_expiry_seconds=EXPIRY_SECONDS
    )
    conv = Conversations(client, config)
    sid = new_session()
    handle = client.get_workflow_handle(workflow_id_for(sid))
    ledger = Ledger()

    def worker():  # type: ignore[no-untyped-def]
        return build_worker(client, config, registry=registry(), model=PlanModel())

    async def pending_ids() -> list[str]:
        try:
            return [c.tool_call_id for c in (await conv.state(sid, OWNER)).pending]
        except ConversationRefused:
            return []  # not started yet

    async def audit_total() -> int:
        try:
            return (await conv.state(sid, OWNER)).audit_total
        except ConversationRefused:
            return 0

    async def update(user: str, decisions: list[Decision]) -> bool:
        try:
            await conv.decide(sid, user, decisions)
        except ConversationRefused:
            ledger.refused_updates += 1
            return False
        for d in decisions:
            ledger.decided_by_update[d.tool_call_id] = d.action
        ledger.last_decisions = decisions
        return True

    async def signal(user: str, decisions: list[Decision]) -> None:
        before = await audit_total()
        body = {"decisions": [d.model_dump(mode="json") for d in decisions], "decided_by": user}
        await handle.signal("decide_signal", body)
        ledger.signals += 1

        async def traced() -> bool:  # applied or refused: either way the audit log grows
            return await audit_total() > before

        await eventually(traced, 60, "a decision signal's trace in the audit log")

    started = False
    running = worker()
    await running.__aenter__()
    try:
        for step in steps:
            kind = step[0]
            pending = await pending_ids()
            event(f"{kind} with {len(pending)} pending" if started else f"{kind} first")
            if kind == "send":
                try:
                    await conv.send(sid, OWNER, f"plan {step[1]} {step[2]}")
                    started = True
                except ConversationRefused as refused:
                    # A turn a signal started may still run (the signal returns at once).
                    assert refused.error_type in (
                        ErrorType.DECISIONS_OWED,
                        ErrorType.TURN_IN_PROGRESS,
                    ), refused.message
                    if refused.error_type == ErrorType.DECISIONS_OWED:
                        assert pending, "a message was refused while no decision was owed"
            elif kind.startswith("signal") and not started:
                try:  # no conversation yet: Temporal says so, nothing is queued anywhere
                    await handle.signal("decide_signal", {"decisions": [], "decided_by": OWNER})
                except RPCError as err:
                    assert err.status == RPCStatusCode.NOT_FOUND
                else:
                    raise AssertionError("a signal to no conversation was accepted")
            elif kind == "decide" and pending:
                await update(OWNER, decisions_for(pending, step[1]))
            elif kind == "decide_stale":
                assert not await update(OWNER, [Decision(tool_call_id="gone", action="approve")])
            elif kind == "decide_partial" and len(pending) > 1:
                partial = decisions_for(pending[:1], ["approve"])
                assert not await update(OWNER, partial), "a decision leaving calls open applied"
            elif kind == "decide_wrong_user" and pending:
                assert not await update(STRANGER, decisions_for(pending, ["approve"]))
            elif kind == "repeat_last_decision" and ledger.last_decisions:
                runs_before = len(RUNS)
                try:  # the same decisions are the same request: the first result, no new run
                    await conv.decide(sid, OWNER, ledger.last_decisions)
                except ConversationRefused:
                    ledger.refused_updates += 1
                assert len(RUNS) == runs_before
            elif kind == "decide_concurrently" and pending:
                outcomes = await asyncio.gather(
                    update(OWNER, decisions_for(pending, ["approve"])),
                    update(OWNER, decisions_for(pending, ["reject"])),
                )
                assert sum(outcomes) <= 1, "two different decisions on one call both applied"
                if not any(outcomes):  # only if the calls expired meanwhile
                    assert not set(pending) & set(await pending_ids())
            elif kind == "signal" and pending:
                await signal(OWNER, decisions_for(pending, step[1]))
            elif kind == "signal_stale":
                await signal(OWNER, [Decision(tool_call_id="gone", action="approve")])
            elif kind == "signal_wrong_user" and pending:
                await signal(STRANGER, decisions_for(pending, ["approve"]))
            elif kind == "restart_worker":
                await running.__aexit__(None, None, None)
                running = worker()  # a fresh cache: the conversation replays from history
                await running.__aenter__()
            elif kind == "let_calls_expire" and pending:

                async def expired() -> bool:
                    return not await pending_ids()

                await eventually(expired, EXPIRY_SECONDS + 60, "the pending calls' expiry")
        if not started:
            return  # no message was ever sent: there is no conversation to check
        await conv.end(sid, OWNER)
        final = await conv.handle(sid).result()
        full = await conv.state(sid, OWNER)
        assert full.transcript_offset == 0 and full.audit_offset == 0  # small enough
    finally:
        await running.__aexit__(None, None, None)

    check(final.transcript, full.audit, sid, ledger)
    event(f"{len(full.audit)} audit entries, {ledger.refused_updates} refused updates")


def check(transcript: list[BaseMessage], audit: list[Any], sid: str, ledger: Ledger) -> None:
    answers = tool_messages(transcript)  # every call answered exactly once
    provider_valid(transcript)
    key_prefix = f"{workflow_id_for(sid)}:"
    runs = [r for r in RUNS if str(r.get("key", "")).startswith(key_prefix)]
    ran = Counter(r["key"].removeprefix(key_prefix) for r in runs)
    assert [call_id for call_id, n in ran.items() if n > 1] == [], "a tool ran twice"
    decided = {  # the decision entries (a rejected call's answer is "decided" too)
        e.tool_call_id: e.detail["action"]
        for e in audit
        if e.event == "decided" and "action" in e.detail
    }
    writes = {r["key"].removeprefix(key_prefix) for r in runs if r["tool"] == "write_record"}
    assert all(decided.get(i) in ("approve", "edit") for i in writes), "a write ran unapproved"
    approved = {i for i, action in decided.items() if action in ("approve", "edit")}
    assert approved == writes, "an approved write did not run exactly once"
    for call_id in approved:
        assert answers[call_id].artifact["status"] == "success"
    # Every decision an update reported applied is in the audit log as made.
    for call_id, action in ledger.decided_by_update.items():
        assert decided.get(call_id) == action
    # Every signal was applied (its calls decided, not by an update) or recorded refused.
    by_signal = {i for i in decided if i not in ledger.decided_by_update}
    refused = [e for e in audit if e.event == "decision_refused"]
    applied_signals = ledger.signals - len(refused)
    assert applied_signals >= 0
    assert (applied_signals == 0) == (not by_signal), "a signal was dropped or invented"


def provider_valid(transcript: list[BaseMessage]) -> None:
    """Each assistant message's tool calls are answered right after it, before the next
    assistant or user message: what every chat-completions provider requires."""
    owed: set[str] = set()
    for message in transcript:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in owed, f"an answer to no open call: {message}"
            owed.discard(message.tool_call_id)
            continue
        assert not owed, f"calls {owed} unanswered before a {type(message).__name__}"
        if isinstance(message, AIMessage):
            owed = {c["id"] for c in message.tool_calls}
    assert not owed, f"calls {owed} never answered"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=os.environ.get("PARLEY_INTERLEAVINGS_SEED") is None,
)
@given(
    steps=st.tuples(SEND).flatmap(
        lambda first: st.lists(STEPS, min_size=1, max_size=8).map(lambda rest: [*first, *rest])
    )
)
def test_generated_interleavings_keep_every_promise(
    temporal_env: WorkflowEnvironment, steps: list[tuple]
) -> None:
    async def one() -> None:
        client = await Client.connect(
            temporal_env.client.service_client.config.target_host,
            namespace=temporal_env.client.namespace,
            data_converter=temporal_env.client.data_converter,
        )
        await play(client, steps)

    asyncio.run(one())
