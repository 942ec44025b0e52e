"""A conversation belongs to the user who started it; an ended one stays ended."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from parley.client import ConversationRefused
from parley.contracts import Decision
from parley.contracts.errors import ErrorType
from tests.support import call, registry, script
from tests.support.transcripts import new_session, runs_in

PROPOSE_WRITE = {"content": "", "tool_calls": [call("write_record", "c1", title="Q3")]}
DONE = {"content": "Done."}


def names_no_one(refusal: ConversationRefused) -> bool:
    text = f"{refusal.message} {refusal}".lower()
    return "alice" not in text and "mallory" not in text


async def test_another_user_cannot_send(parley_worker) -> None:
    async with parley_worker(registry(), script(DONE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "hello")

        with pytest.raises(ConversationRefused) as refused:
            await conversations.send(sid, "mallory", "hello from me")

        assert refused.value.error_type == ErrorType.NOT_OWNER
        assert names_no_one(refused.value)
        state = await conversations.state(sid, "alice")
        assert state.user_id == "alice"
        assert state.counters.turns == 1
        assert "hello from me" not in [m.content for m in state.transcript]


async def test_another_user_cannot_decide_nor_read(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")

        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(
                sid, "mallory", [Decision(tool_call_id="c1", action="approve")]
            )
        assert refused.value.error_type == ErrorType.NOT_OWNER
        assert names_no_one(refused.value)
        assert runs_in(sid, "write_record") == []

        with pytest.raises(ConversationRefused) as refused:
            await conversations.state(sid, "mallory")
        assert "belongs to another user" in refused.value.message
        assert names_no_one(refused.value)

        with pytest.raises(ConversationRefused) as refused:
            await conversations.events(sid, "mallory")
        assert "belongs to another user" in refused.value.message
        assert names_no_one(refused.value)

        with pytest.raises(ConversationRefused):
            await conversations.end(sid, "mallory")
        assert (await conversations.state(sid, "alice")).status == "awaiting_approval"


@pytest.mark.parametrize("user_id", ["", "   ", "default", "Default"])
async def test_missing_or_default_user_is_refused_before_anything_starts(
    parley_worker, user_id: str
) -> None:
    async with parley_worker(registry(), script(DONE)) as conversations:
        sid = new_session()

        with pytest.raises(ConversationRefused) as refused:
            await conversations.send(sid, user_id, "hello")

        assert refused.value.error_type == "InvalidUser"
        with pytest.raises(RPCError) as missing:
            await conversations.handle(sid).describe()
        assert missing.value.status == RPCStatusCode.NOT_FOUND


@pytest.mark.parametrize(
    "session_id", ["", "has space", "slash/y", "x" * 129, "ünï", "abc\n", "abc\r\n"]
)
async def test_malformed_session_id_is_refused(parley_worker, session_id: str) -> None:
    async with parley_worker(registry(), script(DONE)) as conversations:
        with pytest.raises(ConversationRefused) as refused:
            await conversations.send(session_id, "alice", "hello")
        assert refused.value.error_type == "InvalidSession"
        # Nothing started under the raw id either (``conversation-abc\n`` must not exist).
        raw = conversations.handle("ok")._client.get_workflow_handle(f"conversation-{session_id}")
        with pytest.raises(RPCError) as missing:
            await raw.describe()
        assert missing.value.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT)


async def test_a_send_after_end_is_refused(parley_worker) -> None:
    async with parley_worker(registry(), script(DONE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "hello")
        run_id = (await conversations.handle(sid).describe()).run_id

        await conversations.end(sid, "alice")
        final = await conversations.handle(sid).result()  # the workflow has closed
        assert final.status == "ended"

        with pytest.raises(ConversationRefused) as refused:
            await conversations.send(sid, "alice", "hello again")
        assert refused.value.error_type == ErrorType.CONVERSATION_ENDED
        # the latest run is still the closed one: no empty conversation under the same id
        latest = await conversations.handle(sid).describe()
        assert (latest.run_id, latest.status) == (run_id, WorkflowExecutionStatus.COMPLETED)


async def test_a_decision_after_end_is_refused_and_nothing_runs(parley_worker) -> None:
    async with parley_worker(registry(), script(PROPOSE_WRITE, DONE)) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")
        await conversations.end(sid, "alice")
        final = await conversations.handle(sid).result()
        assert final.status == "ended"

        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(
                sid, "alice", [Decision(tool_call_id="c1", action="approve")]
            )

        assert refused.value.error_type == ErrorType.CONVERSATION_ENDED
        assert runs_in(sid, "write_record") == []


async def test_an_empty_message_starts_nothing(parley_worker) -> None:
    async with parley_worker(registry(), script(DONE)) as conversations:
        sid = new_session()
        with pytest.raises(ConversationRefused) as refused:
            await conversations.send(sid, "alice", "  \n")
        assert refused.value.error_type == ErrorType.INVALID_MESSAGE
        with pytest.raises(RPCError) as missing:
            await conversations.handle(sid).describe()
        assert missing.value.status == RPCStatusCode.NOT_FOUND
