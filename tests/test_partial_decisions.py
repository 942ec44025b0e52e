"""One call of several decided where one call is addressed: a signed link, the REST
``decisions`` naming one call (the page's card sends that), ``parley approve CALL``.
The calls it does not name keep waiting, in a subagent's conversation too, and a
surface says "decided" only from the applied result. Real dev server, worker, webhook
and gateway.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from parley.contracts import (
    AuditEntry,
    Decision,
    PendingCall,
    TurnResult,
    refusal_of,
)
from tests.support import ByConversation, call, script
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.policy_tools import planner_registry
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually
from tests.support.webhook import Webhook

SECRET = "test-link-secret-partial-0123456789abcdef"
PAGE = "http://approvals.example"
TASK = "record plans for Q3 and Q4"


def two_plans_model() -> ByConversation:
    """The parent hands a task to the planner, which proposes two confirm calls."""
    return ByConversation(
        scripts={
            "plan both quarters": script(
                {"tool_calls": [call("planner", "p1", task=TASK)]},
                {"content": "The planner is done."},
            ),
            TASK: script(
                {
                    "tool_calls": [
                        call("create_plan", "c1", title="Q3"),
                        call("create_plan", "c2", title="Q4"),
                    ]
                },
                {"content": "Recorded Q3; Q4 was rejected."},
            ),
        }
    )


async def test_a_link_decides_one_of_a_subagents_two_calls(parley_worker) -> None:
    registry = planner_registry()
    with Webhook(200) as webhook:
        async with (
            parley_worker(
                registry,
                two_plans_model(),
                notify_url=webhook.url,
                gateway_public_url=PAGE,
                link_secret=SECRET,
            ) as conversations,
            serve_gateway(conversations) as base,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            sid = new_session()
            child = f"{sid}/planner-1"
            turn = await conversations.send(sid, "alice", "plan both quarters")
            # The plain path is gated: both calls wait, nothing ran.
            assert [p.tool_call_id for p in turn.pending] == [
                "sub-planner-1-c1",
                "sub-planner-1-c2",
            ]
            assert runs_in(child, "create_plan") == []
            await eventually(lambda: webhook.requests, what="the webhook is told")
            links = {(e["tool_call_id"], e["user_id"]): e for e in webhook.requests[0][1]["links"]}
            approve_c1 = base + links[("sub-planner-1-c1", "alice")]["approve"].removeprefix(PAGE)

            used = await http.post(approve_c1)
            assert used.status_code == 200, used.text
            assert "You approved create_plan; it ran: success." in used.text
            assert [r["title"] for r in runs_in(child, "create_plan")] == ["Q3"]
            state = await conversations.state(sid, "alice")
            assert [p.tool_call_id for p in state.pending] == ["sub-planner-1-c2"]
            decided = [e for e in state.audit if e.event == "decided"]
            assert [(e.tool_call_id, e.channel) for e in decided] == [("sub-planner-1-c1", "link")]
            assert not [e for e in state.audit if e.event == "decision_refused"]

            again = await http.post(approve_c1)
            assert again.status_code == 409 and "already used" in again.text
            assert [r["title"] for r in runs_in(child, "create_plan")] == ["Q3"]

            # REST naming the other call (what the page's card sends): it is answered,
            # and the subagent and then the parent go on.
            rejected = await http.post(
                f"/v1/conversations/{sid}/decisions",
                json={"decisions": [{"tool_call_id": "sub-planner-1-c2", "action": "reject"}]},
                headers=auth(ALICE_TOKEN),
            )
            assert rejected.status_code == 200, rejected.text
            body = rejected.json()
            assert body["status"] == "completed" and body["reply"] == "The planner is done."
            assert [r["title"] for r in runs_in(child, "create_plan")] == ["Q3"]


def pending(call_id: str, args_hash: str = "h1", approvals: int = 0) -> PendingCall:
    return PendingCall.model_validate(
        {
            "tool_call_id": call_id,
            "name": "create_plan",
            "args": {"title": "Q3"},
            "description": "Create a plan",
            "args_hash": args_hash,
            "expires_at": datetime.now(UTC),
            "approvals_needed": 2,
            "approvals": [{"by": f"r{i}", "at": datetime.now(UTC)} for i in range(approvals)],
        }
    )


def test_a_call_left_as_it_was_is_not_decided() -> None:
    asked = pending("c1")
    assert TurnResult(status="awaiting_approval", pending=[pending("c1")]).left_waiting(asked)
    # Answered, edited (new arguments) or one approval further: applied.
    assert not TurnResult(status="completed").left_waiting(asked)
    assert not TurnResult(status="awaiting_approval", pending=[pending("c1", "h2")]).left_waiting(
        asked
    )
    further = TurnResult(status="awaiting_approval", pending=[pending("c1", approvals=1)])
    assert not further.left_waiting(asked)


def test_the_reason_a_decision_was_refused_is_read_from_the_audit_log() -> None:
    at = datetime.now(UTC)
    audit = [
        AuditEntry(at=at, event="decided", actor="bob", tool_call_id="c1"),
        AuditEntry(
            at=at,
            event="decision_refused",
            actor="bob",
            tool_call_id="c1",
            detail={"message": "expired, will not run: c1"},
        ),
    ]
    assert refusal_of(audit, {"c1"}) == "expired, will not run: c1"
    assert refusal_of(audit, {"c2"}) is None
    assert Decision(tool_call_id="c1", action="approve")  # the contract is unchanged
