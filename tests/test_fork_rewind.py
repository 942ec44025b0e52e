"""Fork and rewind through a real worker and Temporal dev server, the real ``parley``
console script and the real gateway over HTTP; the model is scripted at the model
boundary (it answers by the conversation's last message, so two conversations sent
different messages get different replies)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from typing import Any

import httpx
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from playwright.async_api import Page, expect
from pydantic import Field
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from parley.activities.model_calls import _with_unique_ids
from parley.cli.binaries import temporal_cli
from parley.client import ConversationRefused, Conversations, fork, rewind
from parley.contracts import ConversationStart, ConversationState, Decision, workflow_id_for
from parley.contracts.conversation import RewindInput
from parley.contracts.errors import ErrorType, TurnInProgress
from parley.storage import LocalFileStorageDriver
from parley.workflows.context import Records, View
from parley.workflows.lifecycle.rewind import Rewinder
from tests.support import registry
from tests.support.browser import page_gateway, send
from tests.support.cli import assert_one_line_error, parley
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.processes import cli_env
from tests.support.transcripts import new_session, runs_in, tool_messages
from tests.support.waiting import eventually


class ByLastMessage(BaseChatModel):
    """``write <title>`` proposes ``write_record``; a tool's answer is met with
    ``written``; anything else with ``re: <text>``. Records what each call saw."""

    seen: list[list[str]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "parley-test-by-last-message"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ByLastMessage:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        self.seen.append([str(m.content) for m in messages])
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content="written")
        elif str(last.content).startswith("write "):
            call = {"name": "write_record", "args": {"title": str(last.content)[6:]}, "id": "w1"}
            reply = AIMessage(content="", tool_calls=[call])
        else:
            reply = AIMessage(content=f"re: {last.content}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def texts(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages]


async def written(conv: Conversations, sid: str, title: str) -> None:
    """``sid`` asks for a write, which alice approves and which runs."""
    turn = await conv.send(sid, "alice", f"write {title}")
    assert turn.status == "awaiting_approval"
    decisions = [Decision(tool_call_id=c.tool_call_id, action="approve") for c in turn.pending]
    assert (await conv.decide(sid, "alice", decisions)).reply == "written"


async def run_id_of(conv: Conversations, sid: str) -> str:
    description = await conv.handle(sid).describe()
    assert description.run_id
    return description.run_id


async def test_a_fork_after_an_approved_tool_call_runs_nothing_again_and_goes_its_own_way(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    model = ByLastMessage()
    queue = f"parley-fork-{uuid.uuid4().hex[:8]}"
    async with parley_worker(registry(), model, task_queue=queue) as conv:
        sid, tid = new_session(), new_session()
        await written(conv, sid, "Q3")
        source = await conv.transcript(sid, "alice")
        assert len(source) == 4  # the message, the call, its result, the reply
        s_run = await run_id_of(conv, sid)
        env = cli_env(client, payload_store, queue)
        forked = await asyncio.to_thread(
            parley, env, "fork", "-s", sid, "--at", "4", "--as", tid, "-u", "alice", "--json"
        )
        assert forked.returncode == 0, forked.stderr
        assert json.loads(forked.stdout) == {
            "session_id": tid,
            "forked_from": sid,
            "at": 4,
            "from_run_id": s_run,
        }
        # Nothing ran for the copied messages: no activity at all in the fork's history.
        history = await conv.handle(tid).fetch_history()
        scheduled = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert scheduled == []
        assert len(runs_in(sid, "write_record")) == 1 and runs_in(tid, "write_record") == []

        # Both go on, each its own way.
        assert (await conv.send(tid, "alice", "hello T")).reply == "re: hello T"
        assert (await conv.send(sid, "alice", "hello S")).reply == "re: hello S"
        assert model.seen[-2] == [*texts(source), "hello T"]  # T's model call read S's four
        fork_transcript = await conv.transcript(tid, "alice")
        assert [m.id for m in fork_transcript[:4]] == [m.id for m in source]
        assert texts(fork_transcript) == [*texts(source), "hello T", "re: hello T"]
        tool_messages(fork_transcript)  # every call answered once
        assert texts(await conv.transcript(sid, "alice")) == [
            *texts(source),
            "hello S",
            "re: hello S",
        ]
        assert len(runs_in(sid, "write_record")) == 1 and runs_in(tid, "write_record") == []

        # Its audit log says where it came from.
        audit = (await conv.state(tid, "alice")).audit
        assert audit[0].event == "forked"
        assert audit[0].detail == {"from_session": sid, "at": 4, "from_run_id": s_run}

        # Refused, each in one line: an id already used, a cut inside a tool call, a count
        # out of range, another user.
        refusals = [
            (["--at", "4", "--as", tid], "already exists"),
            (["--at", "4", "--as", sid], "already exists"),
            (["--at", "2", "--as", new_session()], "the nearest cuts that leave none: 1 "),
            (["--at", "0", "--as", new_session()], "keep 1 to 6 of them, not 0"),
            (["--at", "9", "--as", new_session()], "keep 1 to 6 of them, not 9"),
        ]
        for args, expected in refusals:
            result = await asyncio.to_thread(parley, env, "fork", "-s", sid, *args, "-u", "alice")
            assert_one_line_error(result, expected)
        bob = await asyncio.to_thread(
            parley, env, "fork", "-s", sid, "--at", "1", "--as", new_session(), "-u", "bob"
        )
        assert_one_line_error(bob, "belongs to another user")


async def test_a_rewind_keeps_the_first_messages_in_a_new_run_and_the_old_run_stays(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    model = ByLastMessage()
    queue = f"parley-rewind-{uuid.uuid4().hex[:8]}"
    async with parley_worker(registry(), model, task_queue=queue) as conv:
        sid = new_session()
        await conv.send(sid, "alice", "one")
        await conv.send(sid, "alice", "two")
        first_run = await run_id_of(conv, sid)
        env = cli_env(client, payload_store, queue)
        result = await asyncio.to_thread(
            parley, env, "rewind", "-s", sid, "--to", "2", "-u", "alice", "--json"
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {
            "session_id": sid,
            "to": 2,
            "previous_run_id": first_run,
        }

        async def new_run() -> bool:
            return await run_id_of(conv, sid) != first_run

        await eventually(new_run, what="the rewind's continue-as-new")
        snapshot = await conv.state(sid, "alice")
        assert snapshot.transcript_total == 2
        assert texts(snapshot.transcript) == ["one", "re: one"]
        assert any(e.event == "rewound" and e.detail["to"] == 2 for e in snapshot.audit)
        assert (await conv.send(sid, "alice", "three")).reply == "re: three"
        assert model.seen[-1] == ["one", "re: one", "three"]
        assert texts(await conv.transcript(sid, "alice")) == [
            "one",
            "re: one",
            "three",
            "re: three",
        ]

        # The run before is still readable, by its run id: with the message cut away.
        old = client.get_workflow_handle(workflow_id_for(sid), run_id=first_run)
        assert "two" in json.dumps(
            [str(e) for e in (await old.fetch_history()).events], ensure_ascii=False
        )
        shown = await asyncio.to_thread(
            subprocess.run,
            [
                str(temporal_cli()),
                "workflow",
                "show",
                "--address",
                client.service_client.config.target_host,
                "--namespace",
                client.namespace,
                "-w",
                workflow_id_for(sid),
                "--run-id",
                first_run,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "ContinuedAsNew" in shown.stdout or "ContinueAsNew" in shown.stdout.replace(" ", "")

        # Refused in one line: decisions owed, a count out of range, another user, ended.
        turn = await conv.send(sid, "alice", "write X")
        assert turn.status == "awaiting_approval"
        owed = await asyncio.to_thread(parley, env, "rewind", "-s", sid, "--to", "2", "-u", "alice")
        assert_one_line_error(owed, "decisions are owed on calls")
        await conv.decide(
            sid, "alice", [Decision(tool_call_id=turn.pending[0].tool_call_id, action="reject")]
        )
        refusals = [
            (["--to", "0", "-u", "alice"], "keep 1 to"),
            (["--to", "99", "-u", "alice"], "keep 1 to"),
            (["--to", "1", "-u", "bob"], "belongs to another user"),
        ]
        for args, expected in refusals:
            refused = await asyncio.to_thread(parley, env, "rewind", "-s", sid, *args)
            assert_one_line_error(refused, expected)
        await conv.end(sid, "alice")
        ended = await asyncio.to_thread(
            parley, env, "rewind", "-s", sid, "--to", "2", "-u", "alice"
        )
        assert_one_line_error(ended, "has ended")


async def test_a_call_proposed_again_after_a_rewind_is_a_new_call(parley_worker) -> None:
    """ByLastMessage names every call ``w1``, as providers that number their calls afresh
    each turn do. A rewind cuts the approved call away and the same request proposes it
    again: it gets an id of its own, so its approval (the same decision, the same update
    id) is not answered with the first one's result, and the tool runs again (a new
    idempotency key) rather than handing back the old record."""
    async with parley_worker(registry(), ByLastMessage()) as conv:
        sid = new_session()
        await conv.send(sid, "alice", "hello")
        first = await conv.send(sid, "alice", "write Q1")
        [call] = first.pending
        approve = [Decision(tool_call_id=call.tool_call_id, action="approve")]
        assert (await conv.decide(sid, "alice", approve)).reply == "written"
        first_run = await run_id_of(conv, sid)
        await rewind(conv, sid, "alice", 2)

        async def new_run() -> bool:
            return await run_id_of(conv, sid) != first_run

        await eventually(new_run, what="the rewind's continue-as-new")
        again = await conv.send(sid, "alice", "write Q1")
        [call_again] = again.pending
        assert call_again.tool_call_id != call.tool_call_id
        assert call_again.args == call.args  # the same call, proposed anew
        approve = [Decision(tool_call_id=call_again.tool_call_id, action="approve")]
        decided = await conv.decide(sid, "alice", approve)
        assert decided.status == "completed" and decided.reply == "written", decided
        snapshot = await conv.state(sid, "alice")
        assert snapshot.pending == []
        runs = runs_in(sid, "write_record")
        assert len(runs) == 2 and runs[0]["key"] != runs[1]["key"]
        tool_messages(await conv.transcript(sid, "alice"))  # each call answered once


def test_call_ids_stay_unique_over_rewinds_whatever_the_provider_gives() -> None:
    """The namespaces are Parley's own: a provider's id in one (``r1.…``, ``sub-…``) is
    never kept, and a generated id never lands on one the transcript holds."""
    calls = [
        {"name": "t", "args": {}, "id": "w1", "type": "tool_call"},
        {"name": "t", "args": {}, "id": "r1.w1", "type": "tool_call"},
        {"name": "t", "args": {}, "id": "sub-planner-1-x", "type": "tool_call"},
        {"name": "t", "args": {}, "id": "", "type": "tool_call"},
    ]
    reply = AIMessage(content="", tool_calls=calls)
    before = _with_unique_ids(reply, "m", 4, {"call_m4_3"})
    after = _with_unique_ids(reply, "m", 4, set(), rewinds=1)
    ids_before = [c["id"] for c in before.tool_calls]
    ids_after = [c["id"] for c in after.tool_calls]
    assert ids_before == ["w1", "call_m4_1", "call_m4_2", "call_m4_3.1"]
    assert ids_after == ["r1.w1", "r1.call_m4_1", "r1.call_m4_2", "r1.call_m4_3"]
    assert not set(ids_before) & set(ids_after)


async def test_the_gateway_forks_and_rewinds_for_the_owner_only(parley_worker) -> None:
    async with parley_worker(registry(), ByLastMessage()) as conv:
        sid, tid = new_session(), new_session()
        await written(conv, sid, "Q4")
        async with (
            serve_gateway(conv) as base,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            alice, bob = auth(ALICE_TOKEN), auth(BOB_TOKEN)
            url = f"/v1/conversations/{sid}"
            stranger = await http.post(f"{url}/fork", json={"at": 4, "as": tid}, headers=bob)
            assert stranger.status_code == 404, stranger.text
            inside = await http.post(f"{url}/fork", json={"at": 2, "as": tid}, headers=alice)
            assert inside.status_code == 422, inside.text
            assert "nearest cuts" in inside.json()["error"]["message"]
            answer = await http.post(f"{url}/fork", json={"at": 4, "as": tid}, headers=alice)
            assert answer.status_code == 201, answer.text
            assert answer.json()["forked_from"] == sid and answer.json()["at"] == 4
            again = await http.post(f"{url}/fork", json={"at": 4, "as": tid}, headers=alice)
            assert again.status_code == 422 and "already exists" in again.text
            view = await http.get(f"/v1/conversations/{tid}", headers=alice)
            assert view.json()["transcript_total"] == 4
            assert view.json()["audit"][0]["event"] == "forked"

            await conv.send(sid, "alice", "more")
            assert (
                await http.post(f"{url}/rewind", json={"to": 1}, headers=bob)
            ).status_code == 404
            bad = await http.post(f"{url}/rewind", json={"to": 0}, headers=alice)
            assert bad.status_code == 422, bad.text
            rewound = await http.post(f"{url}/rewind", json={"to": 4}, headers=alice)
            assert rewound.status_code == 200, rewound.text
            assert rewound.json()["to"] == 4 and rewound.json()["previous_run_id"]

            async def cut() -> bool:
                return (await conv.state(sid, "alice")).transcript_total == 4

            await eventually(cut, what="the rewound conversation")
            assert runs_in(tid, "write_record") == [] and len(runs_in(sid, "write_record")) == 1


def test_a_rewind_is_refused_while_a_turn_runs() -> None:
    state = ConversationState(session_id="s", user_id="alice", turn_running=True)
    view = View(state, ConversationStart(session_id="s", user_id="alice"))
    handover = type("H", (), {"rewound": False})()
    rewinder = Rewinder(view, Records.of(state), None, handover)  # type: ignore[arg-type]
    cut = {"at": 1, "context": {"claim": {"k": "v"}, "length": 1}}
    raw = {"user_id": "alice", "cut": cut, "seen_length": 0}
    try:
        rewinder.check(RewindInput.model_validate(raw))
    except TurnInProgress as refused:
        assert refused.type == ErrorType.TURN_IN_PROGRESS
    else:
        raise AssertionError("a rewind during a turn was not refused")


async def test_the_client_refuses_to_fork_a_conversation_that_does_not_exist(parley_worker) -> None:
    async with parley_worker(registry(), ByLastMessage()) as conv:
        try:
            await fork(conv, new_session(), "alice", 1, new_session())
        except ConversationRefused as refused:
            assert refused.error_type == ErrorType.NOT_FOUND
        else:
            raise AssertionError("forked a conversation that does not exist")
        try:
            await rewind(conv, new_session(), "alice", 1)
        except ConversationRefused as refused:
            assert refused.error_type == ErrorType.NOT_FOUND
        else:
            raise AssertionError("rewound a conversation that does not exist")


async def test_try_again_on_the_page_rewinds_to_just_before_the_message(
    parley_worker, page: Page
) -> None:
    """Real Chromium: "try again from here" on the second message cuts the conversation
    to just before it and puts its text back in the box; sending it edited goes on."""
    async with page_gateway(parley_worker, registry(), ByLastMessage(), page) as (base, conv):
        sid = new_session()
        await conv.send(sid, "alice", "one")
        await conv.send(sid, "alice", "two")
        await page.goto(f"{base}/#token={ALICE_TOKEN}&c={sid}")
        transcript = page.get_by_test_id("transcript")
        await expect(transcript).to_contain_text("re: two")
        retry = transcript.get_by_test_id("try-again")
        await expect(retry).to_have_count(1)  # not on the first message: nothing before it
        await retry.click()
        await expect(page.get_by_test_id("message-input")).to_have_value("two")
        await expect(transcript).not_to_contain_text("re: two")
        await send(page, "two, again")
        await expect(transcript).to_contain_text("re: two, again")
        assert texts(await conv.transcript(sid, "alice")) == [
            "one",
            "re: one",
            "two, again",
            "re: two, again",
        ]
