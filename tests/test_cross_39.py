"""Issue 39's features (the judge, the inbox, grants, ``policies suggest``) against the
rest of Parley. A batch approve from the inbox of calls that need two approvals says of
each conversation that the call is not decided, one approval of two counted. A remember
on a call a reviewer rule holds is refused (its grant would never apply). An AG-UI
interrupt's ``responseSchema`` offers every key a resume's decision takes
(``remember_seconds``, ``args_hash``, ``preview_hash``). A subagent's call is judged in
the subagent, its verdict shown on the parent, and a batch approve from the parent's
inbox decides it. A judge's approval waits out the rule's undo window and only the owner
(not a reviewer) takes it back. Grants cross continue-as-new with their fields and lapse
after it; a rewind keeps them, a fork starts with none. A judge's verdicts are no
evidence for ``policies suggest``. Real dev server and worker where a run is involved;
the models are scripted.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from langchain_core.tools import StructuredTool

from parley.client import ConversationRefused, Conversations
from parley.client.forks import fork, rewind
from parley.client.grants import list_grants
from parley.client.inbox import Inbox, decide_like, read_inbox
from parley.contracts import (
    AuditEntry,
    Decision,
    PendingCall,
    PolicyRule,
    SubagentSpec,
    ToolCatalogue,
)
from parley.contracts.names import args_hash
from parley.gateway.agui import DECISION_KEYS, decisions_from_resume
from parley.tools import ToolRegistry, confirm
from parley.tools.suggestions import decided_calls, suggest
from parley.workflows.record.events import decision_schema
from tests.support import ByConversation, call, script
from tests.support.judges import tools as judge_tools
from tests.support.policy_tools import push_branch
from tests.support.recording_tools import RUNS
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

TWO_FOR_MAIN = PolicyRule(
    name="two-for-main",
    tool="push_branch",
    args={"branch": "main"},
    decide="confirm",
    approvals=2,
)


async def _inbox_of(conv: Conversations, user: str, calls: int) -> Inbox:
    async def read() -> Inbox | None:
        found = await read_inbox(conv, user)
        return found if len(found.calls) == calls else None

    return await eventually(read, 60, f"{calls} calls in {user}'s inbox")


async def test_a_batch_approve_of_quorum_calls_counts_one_approval_and_decides_none(
    parley_worker,
) -> None:
    tag = uuid.uuid4().hex[:6]
    me, second = f"rev-{tag}", f"sec-{tag}"
    owners = {"push main one": f"own1-{tag}", "push main two": f"own2-{tag}"}
    model = ByConversation(
        scripts={
            text: script(
                {"tool_calls": [call("push_branch", "q1", branch="main")]}, {"content": "ok"}
            )
            for text in owners
        }
    )
    tools = ToolRegistry([confirm(push_branch)], rules=[TWO_FOR_MAIN])
    async with parley_worker(tools, model) as conv:
        sessions = {}
        for text, owner in owners.items():
            sessions[text] = sid = new_session()
            turn = await conv.send(sid, owner, text, reviewers=[me, second])
            assert turn.status == "awaiting_approval", turn
        await _inbox_of(conv, me, 2)
        first = sessions["push main one"]
        batch = await decide_like(conv, me, first, "q1", "approve")
        assert {a.session_id for a in batch.applied} == set(sessions.values())
        for applied in batch.applied:
            assert applied.outcome == "not_decided", applied
            assert "1 of 2" in applied.detail, applied.detail
        for text, sid in sessions.items():
            (waiting,) = (await conv.state(sid, owners[text])).pending
            assert [a.by for a in waiting.approvals] == [me]
            assert runs_in(sid, "push_branch") == []


def _pending() -> PendingCall:
    return PendingCall(
        tool_call_id="c1",
        name="push_branch",
        args={"branch": "main"},
        args_hash="h",
        description="Push.",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    )


def test_the_interrupts_schema_offers_every_key_a_resume_takes() -> None:
    schema = decision_schema(_pending(), ToolCatalogue(tools=[]))
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(DECISION_KEYS)
    assert schema["properties"]["remember_seconds"]["minimum"] == 1
    (decision,) = decisions_from_resume(
        [
            {
                "interruptId": "c1",
                "status": "resolved",
                "payload": {"action": "approve", "remember": True, "remember_seconds": 60},
            }
        ]
    )
    assert decision.remember and decision.remember_seconds == 60


async def test_a_subagents_call_is_judged_in_the_subagent_and_decided_from_the_parents_inbox(
    parley_worker,
) -> None:
    """The subagent's conversation applies the rule's judge to its own calls: an approve
    runs there, and the parent's turn shows the verdict on that result; a call the judge
    is in doubt about waits on the parent's list with the verdict, reaches the owner's
    inbox, and a batch approve from there decides it and runs it in the subagent."""
    RUNS.clear()
    tag = uuid.uuid4().hex[:6]
    owner, task = f"own-{tag}", f"query both ({tag})"
    rule = PolicyRule(
        name="queries-judged",
        tool="run_query",
        decide="confirm",
        judge="model",
        judge_model="tests.support.judges:careful",
    )
    querier = SubagentSpec(name="querier", description="Runs queries.", tools=["run_query"])
    model = ByConversation(
        scripts={
            "query for me": script(
                {"tool_calls": [call("querier", "p1", task=task)]}, {"content": "all done"}
            ),
            task: script(
                {
                    "tool_calls": [
                        call("run_query", "c1", target="staging", sql="select 1"),
                        call("run_query", "c2", target="archive", sql="select 1"),
                    ]
                },
                {"content": "queried"},
            ),
        }
    )
    tools = ToolRegistry(judge_tools(), rules=[rule], subagents=[querier])
    async with parley_worker(tools, model) as conv:
        sid = new_session()
        turn = await conv.send(sid, owner, "query for me")
        assert turn.status == "awaiting_approval", turn
        ran = {r.tool_call_id: r for r in turn.results}
        approved = ran["sub-querier-1-c1"]
        assert approved.status == "success" and approved.judged is not None
        assert approved.judged.verdict == "approve"
        (waiting,) = turn.pending
        assert waiting.tool_call_id == "sub-querier-1-c2" and waiting.subagent is not None
        assert waiting.judged is not None and waiting.judged.verdict == "escalate"

        (listed,) = (await _inbox_of(conv, owner, 1)).calls
        assert listed.call.tool_call_id == "sub-querier-1-c2" and listed.awaiting.may_approve
        batch = await decide_like(conv, owner, sid, "sub-querier-1-c2", "approve")
        assert [a.outcome for a in batch.applied] == ["decided"], batch
        child = waiting.subagent.session_id
        assert sorted(r["target"] for r in RUNS if r["tool"] == "run_query") == [
            "archive",
            "staging",
        ]
        parent = await conv.state(sid, owner)
        judged = [e for e in parent.audit if e.event == "judged"]
        assert judged == [] or all(e.tool_call_id.startswith("sub-") for e in judged)
        child_state = await conv.state(child, owner)
        assert {e.tool_call_id for e in child_state.audit if e.event == "judged"} == {
            "sub-querier-1-c1",
            "sub-querier-1-c2",
        }


async def test_a_judges_approval_waits_out_the_undo_window_and_only_the_owner_takes_it_back(
    parley_worker,
) -> None:
    """Under a rule with ``undo_seconds``, a judge's approve schedules the call like a
    person's, approved by ``judge:<model>``: a reviewer may not undo it (they did not
    approve it), the owner may, and then it never runs and the model is told."""
    RUNS.clear()
    tag = uuid.uuid4().hex[:6]
    owner, reviewer = f"own-{tag}", f"rev-{tag}"
    judge = "tests.support.judges:careful"
    rule = PolicyRule(
        name="queries-judged",
        tool="run_query",
        decide="confirm",
        judge="model",
        judge_model=judge,
        undo_seconds=3600,
    )
    model = script(
        {"tool_calls": [call("run_query", "q1", target="staging", sql="select 1")]},
        {"content": "Not run, as you wished."},
    )
    async with parley_worker(ToolRegistry(judge_tools(), rules=[rule]), model) as conv:
        sid = new_session()
        sending = asyncio.create_task(conv.send(sid, owner, "count rows", reviewers=[reviewer]))

        async def scheduled() -> list | None:
            try:
                return (await conv.state(sid, owner)).scheduled or None
            except ConversationRefused:  # not started yet
                return None

        (waiting,) = await eventually(scheduled, 60, "the judged call waits in its window")
        assert (waiting.tool_call_id, waiting.approved_by) == ("q1", f"judge:{judge}")
        with pytest.raises(ConversationRefused) as refused:
            await conv.undo(sid, reviewer, ["q1"])
        assert f"only judge:{judge} (who approved it) or the conversation's owner" in str(
            refused.value
        )
        assert (await conv.undo(sid, owner, ["q1"])).undone == ["q1"]
        done = await sending
        (result,) = done.results
        assert result.status == "rejected" and "undid this call" in result.content
        assert [r for r in RUNS if r["tool"] == "run_query"] == []


async def test_grants_cross_continue_as_new_with_their_fields_and_lapse_after_it(
    parley_worker,
) -> None:
    """Each turn continues as new: a grant comes through with what it was given for and
    its lifetime, so a call of its shape in the new run takes it, while one whose
    lifetime ended since asks again, saying when it ended, and is forgotten."""

    def stamp(text: str) -> str:
        return f"stamped {text}"

    tool = confirm(StructuredTool.from_function(func=stamp, name="stamp", description="Stamp."))
    model = script(
        {"tool_calls": [call("stamp", "c1", text="long"), call("stamp", "c2", text="short")]},
        {"content": "ok"},
        {"tool_calls": [call("stamp", "c3", text="long"), call("stamp", "c4", text="short")]},
        {"content": "ok"},
    )
    async with parley_worker(ToolRegistry([tool]), model, continue_as_new_after_events=1) as conv:
        sid, owner = new_session(), f"own-{uuid.uuid4().hex[:6]}"
        await conv.send(sid, owner, "stamp both")
        remember = {"action": "approve", "remember": True}
        decisions = [
            Decision(tool_call_id="c1", remember_seconds=3600, **remember),
            Decision(tool_call_id="c2", remember_seconds=1, **remember),
        ]
        assert (await conv.decide(sid, owner, decisions)).status == "completed"
        state = await conv.state(sid, owner)
        given = {e.tool_call_id: e.detail for e in state.audit if e.event == "remembered"}

        async def continued() -> bool:  # once after the first turn, once after this one
            return (await conv.state(sid, owner)).counters.continued_as_new >= 2

        await eventually(continued, 60, "the run that remembered to continue as new")
        carried = {g.tool_call_id: g for g in await list_grants(conv, sid, owner)}
        assert set(carried) == {"c1", "c2"}
        for grant in carried.values():
            assert grant.expires_at is not None and grant.granted_at is not None
            assert grant.expires_at.isoformat() == given[grant.tool_call_id]["expires_at"]
            assert grant.spec_hash and grant.policy_version and grant.tool == "stamp"
        assert carried["c1"].expires_at - carried["c1"].granted_at == timedelta(seconds=3600)
        short = carried["c2"].expires_at
        assert short is not None
        await eventually(lambda: datetime.now(UTC) > short, what="the short grant to end")

        turn = await conv.send(sid, owner, "again")
        assert [r.tool_call_id for r in turn.results if r.status == "success"] == ["c3"]
        (asked,) = turn.pending
        assert asked.tool_call_id == "c4"
        assert (asked.reason or "").endswith(f"ended at {short:%Y-%m-%d %H:%M:%S} UTC")
        assert [g.tool_call_id for g in await list_grants(conv, sid, owner)] == ["c1"]


async def test_a_call_a_reviewer_rule_holds_cannot_be_remembered(parley_worker) -> None:
    """The rules decide before a remembered decision, and a reviewer rule (a quorum's
    too) always makes its calls wait: a grant on one would be listed in force and never
    apply, so a remember on such a call is refused in one line and no grant is made."""
    tag = uuid.uuid4().hex[:6]
    owner, reviewer = f"own-{tag}", f"rev-{tag}"
    model = script({"tool_calls": [call("push_branch", "q1", branch="main")]}, {"content": "ok"})
    tools = ToolRegistry([confirm(push_branch)], rules=[TWO_FOR_MAIN])
    async with parley_worker(tools, model) as conv:
        sid = new_session()
        (waiting,) = (await conv.send(sid, owner, "push", reviewers=[reviewer, "x"])).pending
        remember = Decision(tool_call_id="q1", action="approve", remember=True)
        with pytest.raises(ConversationRefused) as refused:
            await conv.decide(sid, reviewer, [remember])
        assert "q1 cannot be remembered: rule `two-for-main`" in refused.value.message
        assert "\n" not in refused.value.message
        plain = Decision(tool_call_id="q1", action="approve", args_hash=waiting.args_hash)
        (counted,) = (await conv.decide(sid, reviewer, [plain])).pending
        assert [a.by for a in counted.approvals] == [reviewer]
        assert await list_grants(conv, sid, owner) == []


def test_a_judges_verdicts_are_no_persons_decisions_for_policies_suggest() -> None:
    """``parley policies suggest`` learns from people: calls a rule's judge approved
    (or rejected) are no evidence for a rule, since an ``auto`` made of them would take
    the judge out of its own calls."""
    entries = []
    for i, branch in enumerate(["feat/a", "feat/b", "feat/c", "feat/d", "feat/e"]):
        at = datetime(2026, 12, 1, 9, i, tzinfo=UTC)
        digest = args_hash({"branch": branch})
        common = {"at": at, "tool_call_id": f"c{i}", "name": "push_branch"}
        entries.append(
            AuditEntry(event="proposed", actor="model", detail={"args_hash": digest}, **common)
        )
        action = "approve" if i % 2 else "reject"
        detail = {"action": action, "args_hash": digest, "judge": "m"}
        entries.append(
            AuditEntry(event="decided", actor="judge:m", detail=detail, channel="judge", **common)
        )
    args = {f"c{i}": {"branch": b} for i, b in enumerate(["feat/a", "feat/b", "feat/c"])}
    found = decided_calls("s-1", entries, args)
    assert found == []
    assert suggest(found, minimum=1).rules == []


async def test_a_rewind_keeps_the_conversations_grants_and_a_fork_starts_with_none(
    parley_worker,
) -> None:
    """A remembered approval belongs to its conversation: after a rewind the same call,
    proposed anew under a new id, runs by it without asking; a fork lists no grant and
    the same call waits there for a decision."""

    def stamp(text: str) -> str:
        return f"stamped {text}"

    tool = confirm(StructuredTool.from_function(func=stamp, name="stamp", description="Stamp."))
    model = script(
        {"tool_calls": [call("stamp", "c1", text="x")]},
        {"content": "ok"},
        {"tool_calls": [call("stamp", "c2", text="x")]},
        {"content": "ok"},
    )
    async with parley_worker(ToolRegistry([tool]), model) as conv:
        sid, forked, owner = new_session(), new_session(), f"own-{uuid.uuid4().hex[:6]}"
        await conv.send(sid, owner, "stamp x")
        remember = Decision(tool_call_id="c1", action="approve", remember=True)
        assert (await conv.decide(sid, owner, [remember])).status == "completed"

        await fork(conv, sid, owner, 4, forked)
        assert await list_grants(conv, forked, owner) == []
        there = await conv.send(forked, owner, "again")
        assert [p.tool_call_id for p in there.pending] == ["c2"]

        run = (await conv.handle(sid).describe()).run_id
        await rewind(conv, sid, owner, 1)

        async def rewound() -> bool:
            return (await conv.handle(sid).describe()).run_id != run

        await eventually(rewound, 60, "the rewind's new run")
        assert [g.tool_call_id for g in await list_grants(conv, sid, owner)] == ["c1"]
        here = await conv.send(sid, owner, "again")
        assert here.status == "completed" and here.pending == []
        (ran,) = here.results
        assert ran.status == "success" and ran.tool_call_id != "c1"
        state = await conv.state(sid, owner)
        decided = [
            e for e in state.audit if e.event == "decided" and e.tool_call_id == ran.tool_call_id
        ]
        assert [(e.channel, e.detail.get("remembered_from")) for e in decided] == [
            ("remembered", "c1")
        ]
