"""One inbox: every call waiting on a user across conversations (theirs, and those they
review), read with no worker, the oldest first, filtered by tool, rule and
conversation; identical calls (same tool, same canonical arguments) decided in one
action, each in its own conversation with its own decision, audit entry and result,
while a call whose arguments differ is left waiting. Through the client, ``parley
inbox`` and the gateway. Real dev server and worker; the model is scripted.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from temporalio.client import Client

from parley.client import Conversations
from parley.client.inbox import Inbox, InboxCall, inbox_order, read_inbox
from parley.config.settings import Settings
from parley.contracts import Awaiting, PendingCall, PolicyRule
from parley.contracts.audit import decided_entry
from tests.support import ByConversation, call, registry, script
from tests.support.cli import NOWHERE, assert_one_line_error, parley_against, parley_all
from tests.support.gateway import serve_gateway
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

Q3_RULE = PolicyRule(name="q3-records", tool="write_record", args={"title": "Q3"}, decide="confirm")
#: Each conversation's first message, and the call its model proposes.
PROPOSALS = {
    "write Q3 one": call("write_record", "c1", title="Q3"),
    "write Q4": call("write_record", "c1", title="Q4"),
    "write Q3 two": call("write_record", "c1", title="Q3"),
    "write Q3 three": call("write_record", "c1", title="Q3"),
    "count five": call("strict_write", "s1", count=5),
}


def model() -> ByConversation:
    return ByConversation(
        scripts={
            text: script({"tool_calls": [proposal]}, {"content": "done"})
            for text, proposal in PROPOSALS.items()
        }
    )


def people() -> tuple[str, str, str]:
    """Users of this test only: the dev server is shared."""
    tag = uuid.uuid4().hex[:6]
    return f"ina-{tag}", f"cora-{tag}", f"dov-{tag}"


async def start_five(conv: Conversations, me: str, other: str, stranger: str) -> dict[str, str]:
    """a: mine, Q3 (rule q3-records); b: mine, Q4; c: ``other``'s naming me a reviewer,
    Q3; d: ``stranger``'s, Q3; e: mine, another tool. One after the other, so their calls
    wait in that order."""
    sessions = {name: new_session() for name in "abcde"}
    starts = [
        ("a", me, "write Q3 one", ()),
        ("b", me, "write Q4", ()),
        ("c", other, "write Q3 two", (me,)),
        ("d", stranger, "write Q3 three", ()),
        ("e", me, "count five", ()),
    ]
    for name, owner, text, reviewers in starts:
        turn = await conv.send(sessions[name], owner, text, reviewers=reviewers)
        assert turn.status == "awaiting_approval", turn
    return sessions


async def inbox_of(conv: Conversations, user: str, calls: int, **filters: str) -> Inbox:
    """The user's inbox once visibility shows ``calls`` calls (it trails a moment)."""

    async def read() -> Inbox | None:
        found = await read_inbox(conv, user, **filters)
        return found if len(found.calls) == calls else None

    return await eventually(read, 60, f"{calls} calls in {user}'s inbox")


def refs(inbox: Inbox, sessions: dict[str, str]) -> list[str]:
    names = {sid: name for name, sid in sessions.items()}
    return [f"{names.get(c.session_id, c.session_id)}:{c.call.tool_call_id}" for c in inbox.calls]


async def test_the_inbox_is_read_with_no_worker_oldest_first_and_filtered(
    parley_worker, client: Client
) -> None:
    me, other, stranger = people()
    me = f'{me}"q'  # a name Temporal's SQL visibility cannot compare: read all the same
    tools = registry()
    tools.rules.append(Q3_RULE)
    async with parley_worker(tools, model()) as conv:
        sessions = await start_five(conv, me, other, stranger)
    # The worker is gone: what follows reads Temporal alone.
    found = await inbox_of(conv, me, 4)
    assert refs(found, sessions) == ["a:c1", "b:c1", "c:c1", "e:s1"]
    assert found.unread == []
    by_session = {c.session_id: c for c in found.calls}
    reviewed = by_session[sessions["c"]]
    assert reviewed.owner == other and reviewed.awaiting.may_approve
    assert reviewed.call.args == {"title": "Q3"} and reviewed.rule == "q3-records"
    assert by_session[sessions["b"]].rule is None
    assert by_session[sessions["a"]].call.args_hash == reviewed.call.args_hash
    assert by_session[sessions["b"]].call.args_hash != reviewed.call.args_hash
    assert all(c.call.expires_at > datetime.now(UTC) for c in found.calls)

    only_tool = await read_inbox(conv, me, tool="strict_write")
    assert refs(only_tool, sessions) == ["e:s1"]
    only_rule = await read_inbox(conv, me, rule="q3-records")
    assert refs(only_rule, sessions) == ["a:c1", "c:c1"]
    only_one = await read_inbox(conv, me, session=sessions["b"])
    assert refs(only_one, sessions) == ["b:c1"]
    reviewing = await conv.list(me, reviewing=True)
    assert [c.session_id for c in reviewing] == [sessions["c"]]
    theirs = await inbox_of(conv, stranger, 1)
    assert refs(theirs, sessions) == ["d:c1"]

    listed = await parley_against(conv, client, "inbox", "-u", me, "--json")
    assert listed.returncode == 0, listed.stderr
    assert refs(Inbox.model_validate_json(listed.stdout), sessions) == refs(found, sessions)
    text = await parley_against(conv, client, "inbox", "-u", me, "--rule", "q3-records")
    assert text.returncode == 0, text.stderr
    assert f"2 identical write_record calls: parley inbox approve --like {sessions['a']}:c1" in (
        text.stdout
    )
    assert sessions["b"] not in text.stdout


async def test_identical_calls_approved_at_once_each_in_its_own_conversation(
    parley_worker, client: Client
) -> None:
    """``parley inbox approve --like a:c1``: a and c (the same Q3) are decided, each by
    its own update, with its own audit entry and result; b (Q4) and d (not mine, Q3)
    still wait, and nothing ran there."""
    me, other, stranger = people()
    async with parley_worker(registry(), model()) as conv:
        sessions = await start_five(conv, me, other, stranger)
        await inbox_of(conv, me, 4)
        done = await parley_against(
            conv, client, "inbox", "approve", "--like", f"{sessions['a']}:c1", "-u", me, "--json"
        )
        assert done.returncode == 0, done.stderr
        batch = json.loads(done.stdout)
        applied = {a["session_id"]: a for a in batch["applied"]}
        assert set(applied) == {sessions["a"], sessions["c"]}
        assert {a["outcome"] for a in applied.values()} == {"decided"}
        assert batch["different"] == [f"{sessions['b']}:c1"]
        for name in "ac":
            state = await conv.state(sessions[name], me)
            assert state.status == "idle" and state.pending == []
            entry = decided_entry(state.audit, "c1")
            assert entry is not None and entry.actor == me
            assert [r["title"] for r in runs_in(sessions[name], "write_record")] == ["Q3"]
        assert [c.args for c in (await conv.state(sessions["b"], me)).pending] == [{"title": "Q4"}]
        assert len((await conv.state(sessions["d"], stranger)).pending) == 1
        for name in "bd":
            assert runs_in(sessions[name], "write_record") == []
        left = await inbox_of(conv, me, 2)
        assert refs(left, sessions) == ["b:c1", "e:s1"]


async def test_the_gateway_serves_the_inbox_and_rejects_identical_calls(
    parley_worker,
) -> None:
    """``GET /v1/inbox`` answers the token's user's calls only; ``POST /v1/inbox/decide``
    rejects the identical ones (b's differ: it waits), and a call that does not wait on
    the caller is 404."""
    me, other, stranger = people()
    tokens = {"ina-token-0123456789ab": me, "dov-token-0123456789ab": stranger}
    mine, theirs = ({"Authorization": f"Bearer {token}"} for token in tokens)
    async with (
        parley_worker(registry(), model()) as conv,
        serve_gateway(conv, tokens) as base,
        httpx.AsyncClient(base_url=base, timeout=120) as http,
    ):
        sessions = await start_five(conv, me, other, stranger)
        await inbox_of(conv, me, 4)
        listed = await http.get("/v1/inbox", headers=mine, params={"tool": "write_record"})
        assert listed.status_code == 200, listed.text
        assert refs(Inbox.model_validate(listed.json()), sessions) == ["a:c1", "b:c1", "c:c1"]
        bad = await http.get("/v1/inbox", headers=mine, params={"session": "no good"})
        assert bad.status_code == 422, bad.text
        stranger_sees = Inbox.model_validate((await http.get("/v1/inbox", headers=theirs)).json())
        assert refs(stranger_sees, sessions) == ["d:c1"]
        body = {"session_id": sessions["a"], "tool_call_id": "c1", "action": "reject"}
        refused = await http.post("/v1/inbox/decide", headers=theirs, json=body)
        assert refused.status_code == 404, refused.text
        wordy = {**body, "action": "approve", "message": "fine"}
        unclear = await http.post("/v1/inbox/decide", headers=mine, json=wordy)
        assert unclear.status_code == 422 and "approve takes no message" in unclear.text
        body["message"] = "not this quarter"
        decided = await http.post("/v1/inbox/decide", headers=mine, json=body)
        assert decided.status_code == 200, decided.text
        applied = {a["session_id"]: a["outcome"] for a in decided.json()["applied"]}
        assert applied == {sessions["a"]: "decided", sessions["c"]: "decided"}
        for name in "ac":
            audit = (await conv.state(sessions[name], me)).audit
            mine_ = [e.detail for e in audit if e.event == "decided" and e.actor == me]
            assert [d.get("action") for d in mine_] == ["reject"]
        assert len((await conv.state(sessions["b"], me)).pending) == 1
        assert len((await conv.state(sessions["d"], stranger)).pending) == 1


async def test_calls_the_history_does_not_tell_are_read_by_a_worker_or_listed_unread(
    parley_worker, client: Client
) -> None:
    """A run that handed over while its call waited has no turn result in its history:
    with a worker, a state query reads the call; with none, the conversation is listed
    unread, saying why, never dropped."""
    me, _, _ = people()
    async with parley_worker(registry(), model(), continue_as_new_after_events=1) as conv:
        sid = new_session()
        await conv.send(sid, me, "write Q3 one")

        async def handed_over() -> bool:
            runs = [r async for r in client.list_workflows(f"WorkflowId = 'conversation-{sid}'")]
            return len(runs) == 2

        await eventually(handed_over, 60, "the run to hand over")
        found = await inbox_of(conv, me, 1)
        assert found.calls[0].call.args == {"title": "Q3"} and found.unread == []
    nobody = Conversations(client, Settings(task_queue=f"nobody-{uuid.uuid4().hex[:8]}"))
    unread = await read_inbox(nobody, me)
    assert unread.calls == []
    assert [u.session_id for u in unread.unread] == [sid]
    assert "no worker" in unread.unread[0].reason


def test_calls_that_began_together_are_ordered_by_the_soonest_to_expire() -> None:
    now = datetime.now(UTC)

    def waiting(call_id: str, since: int, expires: int) -> InboxCall:
        pending = PendingCall(
            tool_call_id=call_id,
            name="write_record",
            args={},
            description="",
            expires_at=now + timedelta(seconds=expires),
        )
        return InboxCall(
            session_id="s",
            owner="ina",
            call=pending,
            waiting_since=now - timedelta(seconds=since),
            awaiting=Awaiting(tool_call_id=call_id),
        )

    calls = [waiting("late", 10, 50), waiting("old", 60, 900), waiting("soon", 10, 20)]
    assert [c.call.tool_call_id for c in sorted(calls, key=inbox_order)] == [
        "old",
        "soon",
        "late",
    ]


def test_bad_inbox_commands_answer_in_one_line_before_connecting() -> None:
    answers = parley_all(
        (NOWHERE, ["inbox"]),
        (NOWHERE, ["inbox", "-u", "al ice"]),
        (NOWHERE, ["inbox", "-u", "ina", "-s", "no good"]),
        (NOWHERE, ["inbox", "approve", "--like", "s-1", "-u", "ina"]),
        (NOWHERE, ["inbox", "reject", "--like", "no good:c1", "-u", "ina"]),
    )
    expected = [
        "give your user id: --user USER",
        "user id",
        "no good",
        "--like 's-1': give SESSION:CALL_ID",
        "no good",
    ]
    for answer, words in zip(answers, expected, strict=True):
        assert_one_line_error(answer, words)
