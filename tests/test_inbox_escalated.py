"""The person a call was escalated to has it in their inbox, though they are no member
of its conversation: after a rule's deadline escalated it, or a judge in doubt did, and
not before. They approve it from the inbox (client, ``parley inbox``, ``GET /v1/inbox``
and ``POST /v1/inbox/decide``); a batch "approve all identical" of theirs covers only
the calls escalated to them, never an identical call of the same conversation that was
not. A conversation nobody escalated in publishes nothing more, and one that was replays.
Real dev server and workers; the agent's model and the judge are scripted.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from parley.client import ConversationRefused, Conversations
from parley.client.inbox import Inbox, read_inbox
from parley.contracts import PARLEY_ESCALATED_TO, Decision, PolicyRule
from parley.contracts.audit import decided_entry
from parley.contracts.errors import ErrorType
from parley.tools import ToolRegistry
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.record.publishing import ESCALATED_TO_PUBLISHED
from tests.support import ByConversation, call, registry, script
from tests.support.cli import parley_against
from tests.support.gateway import auth, serve_gateway
from tests.support.judges import tools as judged_tools
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

#: How long a call waits before it is escalated, and again after (the dev server's
#: clock is real: long enough for the reads and the approval between the two).
WAIT = 45.0
PRIYA_TOKEN = "priya-token-0123456789abcdef"
CAREFUL = "tests.support.judges:careful"


def model() -> ByConversation:
    def query(call_id: str, target: str) -> dict:
        return call("run_query", call_id, target=target, sql="select 1")

    return ByConversation(
        scripts={
            "write Q3": script(
                {"tool_calls": [call("write_record", "c1", title="Q3")]}, {"content": "done"}
            ),
            "count analytics": script(
                {"tool_calls": [query("a1", "analytics")]}, {"content": "ok"}
            ),
            "count both": script(
                {"tool_calls": [query("b0", "warehouse"), query("b1", "analytics")]},
                {"content": "ok"},
            ),
        }
    )


async def inbox_of(conv: Conversations, user: str, calls: int) -> Inbox:
    """The user's inbox once it holds ``calls`` calls (visibility trails a moment)."""

    async def read() -> Inbox | None:
        found = await read_inbox(conv, user)
        return found if len(found.calls) == calls else None

    return await eventually(read, 90, f"{calls} calls in {user}'s inbox")


async def history_events(client: Client, sid: str) -> list:
    handle = client.get_workflow_handle(f"conversation-{sid}")
    return [event async for event in handle.fetch_history_events()]


def patch_markers(events: list) -> int:
    marker = EventType.EVENT_TYPE_MARKER_RECORDED
    wanted = ESCALATED_TO_PUBLISHED.encode()
    return sum(1 for e in events if e.event_type == marker and wanted in e.SerializeToString())


def escalated_to_upserts(events: list) -> int:
    upsert = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    return sum(
        1
        for e in events
        if e.event_type == upsert
        and PARLEY_ESCALATED_TO.name
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    )


async def test_a_call_escalated_at_its_deadline_is_in_the_inbox_of_the_person_asked(
    parley_worker, client: Client
) -> None:
    """Before its deadline priya (no member) has nothing; once the rule escalated the
    call to her, the client, the CLI and REST list it, and she approves it from the
    inbox; the owner's inbox keeps it with its new deadline. ``ParleyEscalatedTo`` was
    upserted twice (set, cleared) under one patch marker, none before the escalation."""
    tag = uuid.uuid4().hex[:6]
    alice, priya = f"alice-{tag}", f"priya-{tag}"
    tools = registry()
    tools.rules.append(
        PolicyRule(
            name="ask-priya",
            tool="write_record",
            args={"title": "Q3"},
            decide="confirm",
            timeout_seconds=WAIT,
            on_timeout="escalate",
            escalate_to=priya,
        )
    )
    async with (
        parley_worker(tools, model()) as conv,
        serve_gateway(conv, {PRIYA_TOKEN: priya}) as base,
        httpx.AsyncClient(base_url=base, timeout=120) as http,
    ):
        sid = new_session()
        turn = await conv.send(sid, alice, "write Q3")
        assert [p.tool_call_id for p in turn.pending] == ["c1"]
        # Before its deadline: alice's inbox has it (visibility caught up), priya's not.
        await inbox_of(conv, alice, 1)
        before = await read_inbox(conv, priya)
        (waiting,) = (await conv.state(sid, alice)).pending
        assert waiting.on_timeout is not None and not waiting.on_timeout.escalated
        assert (before.calls, before.unread) == ([], [])  # read before the escalation
        events = await history_events(client, sid)
        assert patch_markers(events) == 0 and escalated_to_upserts(events) == 0

        found = await inbox_of(conv, priya, 1)  # the deadline escalated it to priya
        (item,) = found.calls
        assert (item.session_id, item.owner, item.call.tool_call_id) == (sid, alice, "c1")
        assert item.call.on_timeout is not None and item.call.on_timeout.escalated
        assert item.awaiting.may_approve and priya in item.awaiting.approvers
        # The owner's inbox still has it, with its extended deadline.
        (mine,) = (await inbox_of(conv, alice, 1)).calls
        assert mine.call.expires_at == item.call.expires_at > waiting.expires_at

        listed = await parley_against(conv, client, "inbox", "-u", priya, "--json")
        assert listed.returncode == 0, listed.stderr
        cli_calls = Inbox.model_validate_json(listed.stdout).calls
        assert [(c.session_id, c.call.tool_call_id) for c in cli_calls] == [(sid, "c1")]
        shown = await http.get("/v1/inbox", headers=auth(PRIYA_TOKEN))
        assert shown.status_code == 200, shown.text
        rest_calls = Inbox.model_validate(shown.json()).calls
        assert [(c.session_id, c.call.tool_call_id) for c in rest_calls] == [(sid, "c1")]

        body = {"session_id": sid, "tool_call_id": "c1", "action": "approve"}
        decided = await http.post("/v1/inbox/decide", headers=auth(PRIYA_TOKEN), json=body)
        assert decided.status_code == 200, decided.text
        assert [(a["session_id"], a["outcome"]) for a in decided.json()["applied"]] == [
            (sid, "decided")
        ]
        state = await conv.state(sid, alice)
        assert state.pending == []
        entry = decided_entry(state.audit, "c1")
        assert entry is not None and entry.actor == priya
        assert [r["title"] for r in runs_in(sid, "write_record")] == ["Q3"]
        events = await history_events(client, sid)
        assert patch_markers(events) == 1  # set on escalation, cleared once decided
        assert escalated_to_upserts(events) == 2
        described = await conv.handle(sid).describe()
        assert not described.typed_search_attributes.get(PARLEY_ESCALATED_TO)
        assert (await read_inbox(conv, priya)).calls == []
        history = await conv.handle(sid).fetch_history()
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter)
    assert (await replayer.replay_workflow(history)).replay_failure is None


async def test_a_judges_escalation_reaches_the_inbox_and_a_batch_covers_only_those_calls(
    parley_worker, client: Client
) -> None:
    """a1 (alice's) is escalated to priya by the judge: her inbox lists it from history
    alone, no worker running. Then the rules change: in bob's conversation b0 is
    escalated to priya, b1 (the same call as a1) waits for bob under a rule of its own.
    priya's "approve all like a1" decides a1 only; b1 and b0 still wait."""
    tag = uuid.uuid4().hex[:6]
    # A quote in the name: visibility cannot match it with ``=`` (found all the same).
    alice, bob, priya = f"alice-{tag}", f"bob-{tag}", f'pri"ya-{tag}'
    judged = PolicyRule(
        name="queries-judged",
        tool="run_query",
        decide="confirm",
        judge="model",
        judge_model=CAREFUL,
        judge_instructions="approve read-only queries on staging",
        escalate_to=priya,
    )
    by_hand = PolicyRule(
        name="analytics-by-hand", tool="run_query", args={"target": "analytics"}, decide="confirm"
    )
    queue = f"parley-escalated-{tag}"
    async with parley_worker(
        ToolRegistry(judged_tools(), rules=[judged]), model(), task_queue=queue
    ) as conv:
        a = new_session()
        turn = await conv.send(a, alice, "count analytics")
        (a1,) = turn.pending
        assert a1.on_timeout is not None and a1.on_timeout.escalate_to == priya
    found = await inbox_of(conv, priya, 1)  # no worker runs: read from history
    assert [(c.session_id, c.call.tool_call_id) for c in found.calls] == [(a, "a1")]
    assert found.calls[0].awaiting.may_approve and found.unread == []

    rules = [by_hand, judged]
    async with parley_worker(
        ToolRegistry(judged_tools(), rules=rules), model(), task_queue=queue
    ) as conv:
        b = new_session()
        turn = await conv.send(b, bob, "count both")
        assert [p.tool_call_id for p in turn.pending] == ["b0", "b1"]
        b0, b1 = turn.pending
        assert b0.on_timeout is not None and b0.on_timeout.escalate_to == priya
        assert b1.on_timeout is None or not b1.on_timeout.escalated
        assert b1.args_hash == a1.args_hash  # the same call as a1
        found = await inbox_of(conv, priya, 2)
        assert {(c.session_id, c.call.tool_call_id) for c in found.calls} == {(a, "a1"), (b, "b0")}

        done = await parley_against(
            conv, client, "inbox", "approve", "--like", f"{a}:a1", "-u", priya, "--json"
        )
        assert done.returncode == 0, done.stderr
        batch = json.loads(done.stdout)
        assert [(x["session_id"], x["outcome"]) for x in batch["applied"]] == [(a, "decided")]
        assert batch["different"] == [f"{b}:b0"]
        assert [r["target"] for r in runs_in(a, "run_query")] == ["analytics"]
        assert [p.tool_call_id for p in (await conv.state(b, bob)).pending] == ["b0", "b1"]
        assert runs_in(b, "run_query") == []


async def test_the_person_asked_decides_with_no_worker_and_the_decision_is_kept(
    parley_worker,
) -> None:
    """With no worker running, the person a judge escalated a call to may still decide it:
    their decision is kept by Temporal (not refused as a stranger's) and applied once a
    worker returns, under their name. A stranger is still refused."""
    tag = uuid.uuid4().hex[:6]
    alice, priya = f"alice-{tag}", f"priya-{tag}"
    judged = PolicyRule(
        name="queries-judged",
        tool="run_query",
        decide="confirm",
        judge="model",
        judge_model=CAREFUL,
        escalate_to=priya,
    )
    queue = f"parley-escalated-kept-{tag}"
    async with parley_worker(
        ToolRegistry(judged_tools(), rules=[judged]), model(), task_queue=queue
    ) as conv:
        a = new_session()
        (a1,) = (await conv.send(a, alice, "count analytics")).pending
    approve = [Decision(tool_call_id="a1", action="approve", args_hash=a1.args_hash)]
    with pytest.raises(ConversationRefused) as stranger:
        await conv.decide(a, f"mallory-{tag}", approve)
    assert stranger.value.error_type == ErrorType.NOT_OWNER
    with pytest.raises(ConversationRefused) as kept:
        await conv.decide(a, priya, approve)
    assert kept.value.error_type == ErrorType.NO_WORKER and "kept" in kept.value.message

    async with parley_worker(
        ToolRegistry(judged_tools(), rules=[judged]), model(), task_queue=queue
    ) as conv:

        async def applied() -> bool:
            state = await conv.state(a, alice)
            entry = decided_entry(state.audit, "a1")
            return entry is not None and entry.actor == priya and not state.pending

        await eventually(applied, 90, "priya's kept decision applied")

        async def ran() -> bool:
            return [r["target"] for r in runs_in(a, "run_query")] == ["analytics"]

        await eventually(ran, 90, "the approved query run once")
