"""Failover between the models ``PARLEY_MODEL`` lists: a worker with
``anthropic:claude-test,openai:gpt-test`` against two servers on 127.0.0.1 speaking each
provider's protocol (``FakeAnthropic``, ``FakeOpenAI``), driven through the real client
libraries by a real worker on the real Temporal dev server.

What must hold: a conversation whose Anthropic server starts answering 529 moves to the
OpenAI server once Temporal's retries are spent (the server's ``retry-after`` keeps them
short here), with the tools and the context (the earlier turns, Anthropic's tool call
and its result, converted) and says so (audit ``model_failover``, ``CUSTOM
parley.model_failover``, ``show``, the turn's notice); usage per model is what each
server reported; after the cool-down the conversation is back on the first model, which
reads the second's tool call. A refused key fails over at once; the request's own fault
and a context overflow do not. One pair of servers for the module.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from rich.console import Console
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from parley.activities.compaction import SUMMARY_INSTRUCTIONS
from parley.activities.model_calls import _model_failure
from parley.activities.models.failover import (
    ListedModels,
    build_chat_models,
    carried_over,
)
from parley.cli.rendering import print_snapshot, render_turn
from parley.config.settings import Settings
from parley.contracts import (
    CALL_MODEL,
    MODEL_ACTIVITY,
    PAYLOAD_CONTEXT,
    Decision,
    StateQuery,
    Usage,
)
from parley.contracts.failover import (
    COOLDOWN_VARIABLE,
    MODEL_FAILOVER_EVENT,
    FailoverOffer,
    cooldown_seconds,
    model_specs,
)
from parley.observability.redaction import remember_config
from parley.tools.loading import ModelAccess
from parley.workflows.conversation import ConversationWorkflow
from tests.support import registry
from tests.support.anthropic_fake import Failure, FakeAnthropic, Message
from tests.support.cli import NOWHERE, assert_one_line_error, parley_all
from tests.support.openai_fake import FakeOpenAI
from tests.support.plans import activity_attempts, fetch
from tests.support.provider_runs import anthropic_usage as claude_usage
from tests.support.provider_runs import openai_usage as gpt_usage
from tests.support.provider_runs import point_at
from tests.support.transcripts import new_session

CLAUDE_KEY = "sk-ant-api03-parley-failover-0123456789ab"
OPENAI_KEY = "sk-parley-failover-openai-0123456789abcd"
CLAUDE, GPT = "anthropic:claude-test", "openai:gpt-test"
USER = "alice"
#: Anthropic's overload, with a ``retry-after`` short enough for a quick test.
OVERLOADED = Failure(529, "overloaded_error", "Overloaded", {"retry-after": "0.01"})


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeAnthropic, FakeOpenAI]]:
    with FakeAnthropic(api_key=CLAUDE_KEY) as claude, FakeOpenAI(api_key=OPENAI_KEY) as gpt:
        yield claude, gpt


@pytest.fixture
def fakes(
    servers: tuple[FakeAnthropic, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> tuple[FakeAnthropic, FakeOpenAI]:
    claude, gpt = servers
    return point_at(monkeypatch, claude), point_at(monkeypatch, gpt)


def both(cooldown: float = 300) -> ListedModels:
    """The worker's models as ``PARLEY_MODEL=anthropic:claude-test,openai:gpt-test``
    builds them."""
    settings = Settings.from_env()
    remember_config(settings)
    return build_chat_models(f"{CLAUDE}, {GPT}", ModelAccess.from_settings(settings), cooldown)


# --- the list, the classes that fail over, the conversion --------------------------------


def test_the_list_and_the_cooldown_are_read_at_worker_start(
    fakes: tuple[FakeAnthropic, FakeOpenAI],
) -> None:
    assert model_specs(" anthropic:a , openai:b,") == ["anthropic:a", "openai:b"]
    assert model_specs("scripted") == ["scripted"]
    assert cooldown_seconds({}) == 300 and cooldown_seconds({COOLDOWN_VARIABLE: "12.5"}) == 12.5
    with pytest.raises(ValueError, match=COOLDOWN_VARIABLE):
        cooldown_seconds({COOLDOWN_VARIABLE: "soon"})
    listed = both(60)
    assert listed.specs == (CLAUDE, GPT) and listed.cooldown_seconds == 60
    assert listed.index_of(None) == 0 and listed.index_of(GPT) == 1
    assert listed.index_of("openai:no-longer-listed") == 0
    with pytest.raises(ValueError) as bad:
        build_chat_models(f"{CLAUDE},nonsense", ModelAccess.from_settings(Settings.from_env()), 300)
    line = str(bad.value)
    assert "\n" not in line and "model 2 of 2, 'nonsense'" in line
    with pytest.raises(ValueError, match="lists a model twice"):
        build_chat_models(f"{CLAUDE},{CLAUDE}", ModelAccess(), 300)


def test_a_bad_list_is_one_line_at_worker_start() -> None:
    """``parley worker`` builds every listed model before it starts: a bad one, or a
    bad cool-down, is one line naming it (the cluster is never contacted)."""
    base = {**NOWHERE, "PARLEY_TOOLS": "", "ANTHROPIC_API_KEY": CLAUDE_KEY}
    cases = [
        (
            {**base, "PARLEY_MODEL": f"{CLAUDE},no_such_mod:factory"},
            "model 2 of 2, 'no_such_mod:factory': cannot load no_such_mod:factory",
        ),
        ({**base, "PARLEY_MODEL": f"{CLAUDE},{CLAUDE}"}, "lists a model twice"),
        (
            {**base, "PARLEY_MODEL": f"{CLAUDE},scripted", COOLDOWN_VARIABLE: "soon"},
            f"{COOLDOWN_VARIABLE}='soon' is not a number of seconds",
        ),
    ]
    results = parley_all(*((env, ["worker"]) for env, _ in cases))
    for (_, expected), result in zip(cases, results, strict=True):
        assert_one_line_error(result, expected)


@pytest.mark.parametrize(
    ("status", "error_type", "message", "fails_over"),
    [
        (529, "overloaded_error", "Overloaded", True),
        (429, "rate_limit_error", "rate limited", True),
        (500, "api_error", "Internal server error", True),
        (401, "authentication_error", "invalid x-api-key", True),
        (403, "permission_error", "Your API key does not have permission", True),
        (404, "not_found_error", "model: claude-test", True),
        (400, "invalid_request_error", "messages: roles must alternate", False),
        (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", False),
    ],
)
async def test_which_failures_offer_the_next_model(
    fakes: tuple[FakeAnthropic, FakeOpenAI],
    status: int,
    error_type: str,
    message: str,
    fails_over: bool,
) -> None:
    """The provider's outage (its retries spent) and its refusal of us fail over; the
    request's fault does not, and a context overflow compacts instead."""
    claude, _ = fakes
    listed = both()
    claude.error(status, error_type, message)
    with pytest.raises(Exception) as info:
        await listed.first.ainvoke([HumanMessage("hi")])
    failure = _model_failure(info.value, offer=listed.offer(0))
    offer = FailoverOffer.of_failure(failure)
    assert (offer is not None) is fails_over
    if offer is not None:
        assert offer == FailoverOffer(model=CLAUDE, models=[CLAUDE, GPT], cooldown_seconds=300)
    # One model: nothing to offer, the failure as it always was.
    assert FailoverOffer.of_failure(_model_failure(info.value)) is None


def test_another_providers_parts_are_converted_never_dropped() -> None:
    written = AIMessage(
        content=[
            {"type": "thinking", "thinking": "they want Q3", "signature": "sig"},
            {"type": "text", "text": "I will write it.", "index": 1},
            {"type": "tool_use", "id": "toolu_1", "name": "write_record", "input": {"title": "Q3"}},
            {"type": "tool_use", "id": "toolu_x", "name": "read_records", "input": {}},
        ],
        tool_calls=[{"name": "write_record", "args": {"title": "Q3"}, "id": "toolu_1"}],
        response_metadata={"model_provider": "anthropic"},
    )
    answer = ToolMessage(content='{"written": "Q3"}', tool_call_id="toolu_1")
    view = [HumanMessage("write Q3"), written, answer]
    assert carried_over(view, "anthropic") == view  # its own provider reads its parts
    sent = carried_over(view, "openai")
    assert sent[0] is view[0] and sent[2] is view[2]
    converted = sent[1]
    assert isinstance(converted, AIMessage) and isinstance(converted.content, str)
    assert converted.tool_calls == written.tool_calls
    assert "I will write it." in converted.content
    assert "[a thinking part written by anthropic, not carried over]" in converted.content
    assert "[called read_records {}, as anthropic wrote it]" in converted.content


def test_usage_per_model_adds_up_and_old_usage_reads_back() -> None:
    old = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5, "model_calls": 1}
    plain = Usage.model_validate(old)
    assert plain.by_model is None
    assert plain.model_dump(mode="json", context=PAYLOAD_CONTEXT) == old
    a, b = Usage(total_tokens=5, model_calls=1), Usage(total_tokens=7, model_calls=1)
    total = plain + a.under(CLAUDE) + b.under(GPT) + a.under(CLAUDE)
    assert total.total_tokens == 22 and total.model_calls == 4
    assert total.by_model == {
        CLAUDE: Usage(total_tokens=10, model_calls=2),
        GPT: Usage(total_tokens=7, model_calls=1),
    }
    assert Usage.model_validate(total.model_dump(mode="json", context=PAYLOAD_CONTEXT)) == total
    # A failed call's billed usage counts under the model that billed it.
    billed = {"input_tokens": 9, "output_tokens": 1, "total_tokens": 10}
    failed = ApplicationError("cut off", {"usage_metadata": billed, "model": GPT})
    assert Usage.of_failure(failed) == Usage(
        input_tokens=9, output_tokens=1, total_tokens=10, model_calls=1
    ).under(GPT)
    unnamed = Usage.of_failure(ApplicationError("cut off", {"usage_metadata": billed}))
    assert unnamed is not None and unnamed.by_model is None


# --- through a worker -------------------------------------------------------------------


async def test_an_overloaded_provider_fails_over_mid_conversation_and_comes_back(
    parley_worker, client: Client, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    claude, gpt = fakes
    # Long enough that turn 2 ends on GPT even on a saturated machine (its second call
    # must not be the one that goes back), short enough to wait out before turn 3.
    cooldown = 15.0
    sid = new_session()
    async with parley_worker(registry(), both(cooldown)) as conversations:
        # Turn 1, on Claude: a tool call through the gate.
        claude.reply(
            "I will write it.",
            tool_calls=[{"name": "write_record", "args": {"title": "Q3"}, "id": "toolu_q3"}],
        )
        claude.reply("Written: Q3.")
        first = await conversations.send(sid, USER, "write a record Q3")
        assert first.status == "awaiting_approval" and first.notice is None
        done = await conversations.decide(
            sid, USER, [Decision(tool_call_id="toolu_q3", action="approve")]
        )
        assert (done.status, done.reply) == ("completed", "Written: Q3.")
        claude_before = len(claude.message_requests)

        # Turn 2: Claude answers 529 from now on; the turn moves to GPT.
        claude.responder = lambda request: OVERLOADED
        gpt.reply(
            "Claude is away; I will write Q4.",
            tool_calls=[{"name": "write_record", "args": {"title": "Q4"}, "id": "call_q4"}],
        )
        gpt.reply("Written: Q4.")
        second = await conversations.send(sid, USER, "write a record Q4")
        assert second.status == "awaiting_approval", second.error
        assert second.reply == "Claude is away; I will write Q4."
        assert second.notice is not None
        assert f"the model changed from {CLAUDE} to {GPT}" in second.notice
        assert "overloaded" in second.notice
        (pending,) = second.pending
        assert (pending.name, pending.args) == ("write_record", {"title": "Q4"})
        after = await conversations.decide(
            sid, USER, [Decision(tool_call_id=pending.tool_call_id, action="approve")]
        )
        assert (after.status, after.reply) == ("completed", "Written: Q4.")
        state = await conversations.state(sid, USER)
        events = [e.event for e in (await conversations.events(sid, USER)).events]
        history = await fetch(conversations, sid)

        # Every retry the policy allows was spent on Claude before the move.
        attempts = MODEL_ACTIVITY.retry.maximum_attempts
        assert len(claude.message_requests) - claude_before == attempts
        assert attempts in activity_attempts(history, CALL_MODEL)

        # The context carried over: GPT read turn 1, Claude's call and its result.
        sent = gpt.chat_requests[0].body["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
        assert sent[1]["content"] == "I will write it."  # Claude's blocks, as text
        assert [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in sent[1]["tool_calls"]
        ] == [("toolu_q3", "write_record", {"title": "Q3"})]
        assert sent[2]["tool_call_id"] == "toolu_q3"
        assert json.loads(sent[2]["content"]) == {"written": "Q3", "by": USER}
        assert sent[3]["content"] == "Written: Q3." and sent[4]["content"] == "write a record Q4"
        offered = {t["function"]["name"] for t in gpt.chat_requests[0].body["tools"]}
        assert offered == {t["name"] for t in claude.message_requests[0].body["tools"]}
        assert {"write_record", "read_records"} <= offered  # the tools carried over

        # Said so: the audit log, the CUSTOM event, show.
        (moved,) = [e for e in state.audit if e.event == "model_failover"]
        assert moved.detail["from"] == CLAUDE and moved.detail["to"] == GPT
        assert "overloaded" in moved.detail["why"]
        customs = [e for e in events if e["type"] == "CUSTOM" and e["name"] == MODEL_FAILOVER_EVENT]
        assert [c["value"] for c in customs] == [moved.detail]
        shown = _shown(state)
        assert "model_failover" in shown and GPT in shown
        turn_text = Console(record=True, width=200)
        render_turn(second, turn_text)
        assert f"the model changed from {CLAUDE} to {GPT}" in turn_text.export_text()

        # Usage per model: what each server reported.
        assert state.usage is not None and state.usage.by_model is not None
        assert state.usage.by_model[CLAUDE] == claude_usage(claude)
        assert state.usage.by_model[GPT] == gpt_usage(gpt)
        assert state.usage.model_calls == len(claude.usage_reported) + len(gpt.usage_reported)
        assert f"by model: {CLAUDE}" in shown

        # Turn 3: Claude is back; after the cool-down, so is the conversation.
        claude.responder = None
        claude.reply("Back on Claude.")
        back_at = moved.at + timedelta(seconds=cooldown)
        await asyncio.sleep(max(0.0, (back_at - datetime.now(UTC)).total_seconds()) + 0.2)
        third = await conversations.send(sid, USER, "are you back?")
        assert (third.status, third.reply) == ("completed", "Back on Claude.")
        assert third.notice is not None and f"from {GPT} to {CLAUDE}" in third.notice
        state = await conversations.state(sid, USER)
        history = await fetch(conversations, sid)

    # Deterministic: the run replays, failovers and the way back included.
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter)
    assert (await replayer.replay_workflow(history)).replay_failure is None

    moves = [e.detail for e in state.audit if e.event == "model_failover"]
    assert [(m["from"], m["to"]) for m in moves] == [(CLAUDE, GPT), (GPT, CLAUDE)]
    assert "cool-down" in moves[1]["why"]
    # Claude reads GPT's tool call and its result as its own protocol has them.
    sent = claude.last_request.body["messages"]
    uses = [
        (b["id"], b["name"], b["input"])
        for m in sent
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert uses[-1] == (pending.tool_call_id, "write_record", {"title": "Q4"})
    results = [
        b["tool_use_id"]
        for m in sent
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert results == ["toolu_q3", pending.tool_call_id]
    assert state.usage is not None and state.usage.by_model is not None
    assert state.usage.by_model[CLAUDE] == claude_usage(claude)
    assert state.usage.by_model[GPT] == gpt_usage(gpt)


async def test_a_refused_key_fails_over_at_once_and_a_bad_request_does_not(
    parley_worker, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    claude, gpt = fakes
    claude.error(401, "authentication_error", "invalid x-api-key")
    gpt.reply("Hello from GPT.")
    sid = new_session()
    async with parley_worker(registry(), both()) as conversations:
        turn = await conversations.send(sid, USER, "hello")
        history = await fetch(conversations, sid)
        assert (turn.status, turn.reply) == ("completed", "Hello from GPT.")
        assert turn.notice is not None and "refused the API key" in turn.notice
        assert activity_attempts(history, CALL_MODEL) == [1, 1]  # never retried

        # On GPT now: its request's own fault fails the turn, and no other model is tried.
        claude_calls = len(claude.message_requests)
        gpt.error(400, {"error": {"message": "Invalid 'messages'", "type": "invalid_request"}})
        refused = await conversations.send(sid, USER, "again")
        state = await conversations.state(sid, USER, StateQuery(user_id=USER))
    assert refused.status == "failed" and refused.notice is None
    assert refused.error is not None and "HTTP 400" in refused.error
    assert len(claude.message_requests) == claude_calls
    assert [e.detail["to"] for e in state.audit if e.event == "model_failover"] == [GPT]
    assert state.last_turn is not None and state.last_turn.status == "failed"


def _shown(state: Any) -> str:
    console = Console(record=True, width=300)
    print_snapshot(state, console, audit=True, hint=False)
    return console.export_text()


async def test_a_compaction_fails_over_too(
    parley_worker, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    """The summary of a compaction is a model call like the others: written by the
    conversation's model, and by the next one when that one is refused."""
    claude, gpt = fakes

    def answer(request: Any) -> Message | Failure:
        system = request.body.get("system") or []
        texts = [b.get("text") for b in system] if isinstance(system, list) else [system]
        if SUMMARY_INSTRUCTIONS in texts:
            return Failure(401, "authentication_error", "invalid x-api-key")
        return Message("Noted.")

    claude.responder = answer
    gpt.reply("Summary: a long first message.")
    gpt.reply("Noted the second too.")
    sid = new_session()
    long = "x" * 800  # about 200 tokens: two of them pass the budget of 300
    async with parley_worker(registry(), both(), model_context_tokens=600) as conversations:
        first = await conversations.send(sid, USER, f"first: {long}")
        assert (first.status, first.reply) == ("completed", "Noted.")
        second = await conversations.send(sid, USER, f"second: {long}")
        state = await conversations.state(sid, USER)

    assert (second.status, second.reply) == ("completed", "Noted the second too."), second.error
    assert second.notice is not None and "refused the API key" in second.notice
    summary, call = (r.body["messages"] for r in gpt.chat_requests)
    assert summary[0] == {"role": "system", "content": SUMMARY_INSTRUCTIONS}
    assert "Summary: a long first message." in call[0]["content"]
    assert [e.event for e in state.audit if e.event in ("model_failover", "compacted")] == [
        "model_failover",
        "compacted",
    ]
    assert state.usage.by_model is not None
    assert state.usage.by_model[GPT] == gpt_usage(gpt)
    assert state.usage.by_model[CLAUDE] == claude_usage(claude)
