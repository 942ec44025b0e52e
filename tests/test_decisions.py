"""Decisions on pending calls: edit, reject, respond, and the rules of `decide`."""

from __future__ import annotations

import pytest

from parley.client import ConversationRefused
from parley.contracts import Decision
from parley.contracts.errors import ErrorType
from tests.support import call, registry, script
from tests.support.transcripts import (
    ai_messages,
    envelope_status,
    new_session,
    runs_in,
    tool_messages,
)

PROPOSE_WRITE = {
    "content": "I will write it.",
    "tool_calls": [call("write_record", "c1", title="Q3")],
}
DONE = {"content": "Done."}


async def test_edit_with_invalid_args_is_refused_and_nothing_runs(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        for bad_args in ({"title": 42}, {}, {"title": "Q3", "force": True}):
            with pytest.raises(ConversationRefused) as refused:
                await conversations.decide(
                    sid, "alice", [Decision(tool_call_id="c1", action="edit", args=bad_args)]
                )
            assert refused.value.error_type == ErrorType.INVALID_DECISION
            assert "c1" in refused.value.message
            if "force" in bad_args:  # a key the tool does not have
                assert "'force' was unexpected" in refused.value.message

        state = await conversations.state(sid, "alice")
        assert state.status == "awaiting_approval"
        assert [p.tool_call_id for p in state.pending] == ["c1"]
        assert tool_messages(state.transcript, pending=("c1",)) == {}
        assert runs_in(sid, "write_record") == []


async def test_valid_edit_runs_with_new_args_and_keeps_the_models_call(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        result = await conversations.decide(
            sid, "alice", [Decision(tool_call_id="c1", action="edit", args={"title": "Q4"})]
        )

        assert result.status == "completed"
        assert [r["title"] for r in runs_in(sid, "write_record")] == ["Q4"]
        state = await conversations.state(sid, "alice")
        # the transcript shows what the model proposed, not what the reviewer ran
        assert ai_messages(state.transcript)[0].tool_calls[0]["args"] == {"title": "Q3"}
        answer = tool_messages(state.transcript)["c1"]
        assert answer.status == "success"
        assert envelope_status(answer) == "success"
        # who edited, said as it is (the owner here, not "a reviewer")
        assert "alice, the owner, changed the arguments" in answer.content
        assert '"Q4"' in answer.content
        assert answer.artifact["payload"] == {"written": "Q4", "by": "alice"}


async def test_reject_tells_the_model_not_to_retry_and_nothing_runs(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        result = await conversations.decide(
            sid,
            "alice",
            [Decision(tool_call_id="c1", action="reject", message="wrong quarter")],
        )

        assert result.status == "completed"
        assert [(r.tool_call_id, r.status) for r in result.results] == [("c1", "rejected")]
        assert runs_in(sid, "write_record") == []
        answer = tool_messages((await conversations.state(sid, "alice")).transcript)["c1"]
        assert answer.status == "error"
        assert envelope_status(answer) == "rejected"
        assert "did not run" in answer.content
        assert "wrong quarter" in answer.content
        assert "Do not retry it unless the user asks" in answer.content


async def test_reject_without_a_message(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        await conversations.decide(sid, "alice", [Decision(tool_call_id="c1", action="reject")])

        answer = tool_messages((await conversations.state(sid, "alice")).transcript)["c1"]
        assert (answer.status, envelope_status(answer)) == ("error", "rejected")
        assert "reason" not in answer.content
        assert runs_in(sid, "write_record") == []


async def test_respond_gives_the_message_to_the_model_as_the_result(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        result = await conversations.decide(
            sid,
            "alice",
            [Decision(tool_call_id="c1", action="respond", message="Use the Q4 sheet instead.")],
        )

        assert result.status == "completed"
        assert runs_in(sid, "write_record") == []
        answer = tool_messages((await conversations.state(sid, "alice")).transcript)["c1"]
        assert answer.content == "Use the Q4 sheet instead."
        assert answer.status == "error"
        assert envelope_status(answer) == "rejected"
        assert answer.artifact["payload"]["decision"] == "respond"


THREE_WRITES = {
    "content": "Three writes.",
    "tool_calls": [
        call("write_record", "c1", title="a"),
        call("write_record", "c2", title="b"),
        call("strict_write", "c3", count=2),
    ],
}


@pytest.mark.parametrize(
    "decided",
    [
        pytest.param([], id="none"),
        pytest.param(["c1", "c2", "c3", "c9"], id="unknown"),
        pytest.param(["c1", "c2", "c3", "c1"], id="duplicate"),
    ],
)
async def test_a_malformed_set_of_decisions_applies_nothing(
    parley_worker, decided: list[str]
) -> None:
    async with parley_worker(registry(), script(THREE_WRITES, DONE)) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "write three")
        assert [p.tool_call_id for p in turn.pending] == ["c1", "c2", "c3"]

        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(
                sid, "alice", [Decision(tool_call_id=i, action="approve") for i in decided]
            )
        assert refused.value.error_type == ErrorType.INVALID_DECISION
        assert runs_in(sid, "write_record") == [] and runs_in(sid, "strict_write") == []
        state = await conversations.state(sid, "alice")
        assert len(state.pending) == 3
        assert tool_messages(state.transcript, pending=("c1", "c2", "c3")) == {}

        # all three at once, each with its own action
        result = await conversations.decide(
            sid,
            "alice",
            [
                Decision(tool_call_id="c1", action="approve"),
                Decision(tool_call_id="c2", action="reject"),
                Decision(tool_call_id="c3", action="edit", args={"count": 3}),
            ],
        )
        assert result.status == "completed"
        answers = tool_messages((await conversations.state(sid, "alice")).transcript)
        statuses = {i: (m.status, envelope_status(m)) for i, m in answers.items()}
        assert statuses == {
            "c1": ("success", "success"),
            "c2": ("error", "rejected"),
            "c3": ("success", "success"),
        }
        assert [r["title"] for r in runs_in(sid, "write_record")] == ["a"]
        assert [r["count"] for r in runs_in(sid, "strict_write")] == [3]


async def test_decide_with_nothing_pending_is_refused(parley_worker) -> None:
    async with parley_worker(registry(), script(DONE)) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "hello")
        assert turn.status == "completed"

        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )

        assert refused.value.error_type == ErrorType.NO_DECISIONS_OWED
        state = await conversations.state(sid, "alice")
        assert state.status == "idle"
        assert state.counters.decisions == 0
