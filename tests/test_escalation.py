"""Escalation: a policy rule says what happens to a call nobody decided on in time: it
expires (the default), is rejected with a reason the model reads, or is escalated
(another person is told through the webhook and the call waits as long again, then
expires). The deadline stays a durable timer: the real workflow runs on the
time-skipping test server, so hours pass in a moment."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import Decision, PolicyRule
from parley.contracts.errors import ErrorType
from parley.worker.wiring import build_worker
from tests.support import call, registry
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.time_skipping import recording_script
from tests.support.transcripts import envelope_status, new_session, runs_in, tool_messages
from tests.support.webhook import Webhook

PAGE = "http://approvals.example"
LINK_SECRET = "test-link-secret-escalation-0123456789"
REJECT = PolicyRule(
    name="change-window",
    tool="write_record",
    args={"title": "prod-*"},
    decide="confirm",
    timeout_seconds=3600,
    on_timeout="reject",
    timeout_reason="the change window closed",
)
ESCALATE = PolicyRule(
    name="ask-the-lead",
    tool="write_record",
    decide="confirm",
    timeout_seconds=2 * 3600,
    on_timeout="escalate",
    escalate_to="lead",
)


def settings(**fields: object) -> Settings:
    return Settings(task_queue=f"parley-escalate-{uuid.uuid4().hex[:8]}", **fields)  # type: ignore[arg-type]


async def test_a_rule_rejects_a_call_at_its_deadline_with_a_reason_the_model_reads(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    model = recording_script(
        {"content": "", "tool_calls": [call("write_record", "w1", title="prod-db")]},
        {"content": "The change window closed; I did not write it."},
    )
    tools = registry()
    tools.rules = [REJECT, ESCALATE]
    config = settings()
    async with build_worker(env.client, config, registry=tools, model=model):
        conversations = Conversations(env.client, config)
        sid = new_session()
        turn = await conversations.send(sid, "alice", "write prod-db")
        (pending,) = turn.pending
        assert pending.reason == "confirm because rule `change-window` matched"
        assert pending.on_timeout is not None and pending.on_timeout.action == "reject"

        await env.sleep(timedelta(minutes=61))

        state = await conversations.state(sid, "alice")
        assert (state.status, state.pending) == ("idle", [])
        answer = tool_messages(state.transcript)["w1"]
        assert envelope_status(answer) == "rejected"
        assert "the change window closed" in answer.content and "1 h" in answer.content
        assert model.inputs[1][-1].content == answer.content  # the model read it
        assert runs_in(sid, "write_record") == []


async def test_a_rule_escalates_once_then_the_call_expires(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    model = recording_script(
        {"content": "", "tool_calls": [call("write_record", "w2", title="Q3")]},
        {"content": "Nobody decided; not written."},
    )
    tools = registry()
    tools.rules = [REJECT, ESCALATE]
    with Webhook(200) as hook:
        config = settings(notify_url=hook.url)
        async with build_worker(env.client, config, registry=tools, model=model):
            conversations = Conversations(env.client, config)
            sid = new_session()
            turn = await conversations.send(sid, "alice", "write Q3")
            first_deadline = turn.pending[0].expires_at

            await env.sleep(timedelta(hours=2, minutes=30))  # past the first deadline

            state = await conversations.state(sid, "alice")
            (waiting,) = state.pending  # still waiting, now for the lead too
            assert waiting.on_timeout is not None and waiting.on_timeout.escalated
            extended = waiting.expires_at - (first_deadline + timedelta(hours=2))
            assert timedelta(0) <= extended < timedelta(seconds=5)  # from when the timer fired
            (escalated,) = [e for e in state.audit if e.event == "escalated"]
            assert escalated.detail["to"] == "lead"
            bodies = [body for _, body in hook.requests]
            assert [b["event"] for b in bodies] == ["awaiting_decision", "escalated"]
            assert bodies[1]["escalated_to"] == "lead"
            assert [p["tool_call_id"] for p in bodies[1]["pending"]] == ["w2"]

            await env.sleep(timedelta(hours=2))  # past the extended deadline

            state = await conversations.state(sid, "alice")
            assert state.pending == []
            answer = tool_messages(state.transcript)["w2"]
            assert envelope_status(answer) == "expired" and "4 h" in answer.content
            assert [e.event for e in state.audit].count("escalated") == 1
            assert runs_in(sid, "write_record") == []


async def test_the_person_a_call_is_escalated_to_sees_and_decides_that_call_only(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    """lead is no reviewer: before the escalation lead can read and decide nothing; after
    it, lead's link, REST and client see the escalated call alone (no message, no other
    call) and decide it, and nothing else."""
    env = time_skipping_env
    model = recording_script(
        {
            "content": "",
            "tool_calls": [
                call("write_record", "w5", title="Q3"),
                call("write_record", "w6", title="prod-db"),
            ],
        },
        {"content": "Wrote Q3 as the lead approved."},
    )
    tools = registry()
    tools.rules = [REJECT, ESCALATE]
    lead_token = "lead-token-0123456789abcdef"
    with Webhook(200) as hook:
        config = settings(notify_url=hook.url, gateway_public_url=PAGE, link_secret=LINK_SECRET)
        async with build_worker(env.client, config, registry=tools, model=model):
            conversations = Conversations(env.client, config)
            tokens = {ALICE_TOKEN: "alice", lead_token: "lead"}
            async with (
                serve_gateway(conversations, tokens) as base,
                httpx.AsyncClient(base_url=base, timeout=60) as http,
            ):
                sid = new_session()
                turn = await conversations.send(sid, "alice", "write Q3 and prod-db")
                assert [p.tool_call_id for p in turn.pending] == ["w5", "w6"]
                approve_w5 = Decision(tool_call_id="w5", action="approve")
                # Before the escalation lead is nobody here.
                with pytest.raises(ConversationRefused) as refused:
                    await conversations.state(sid, "lead")
                assert refused.value.error_type == ErrorType.NOT_OWNER
                with pytest.raises(ConversationRefused):
                    await conversations.decide(sid, "lead", [approve_w5])

                await env.sleep(timedelta(hours=2, minutes=30))  # w6 rejected, w5 escalated

                seen = await conversations.state(sid, "lead")
                assert [p.tool_call_id for p in seen.pending] == ["w5"]
                assert seen.transcript == [] and seen.usage.total_tokens == 0
                assert {e.tool_call_id for e in seen.audit} == {"w5"}
                shown = await http.get(f"/v1/conversations/{sid}", headers=auth(lead_token))
                assert shown.status_code == 200, shown.text
                assert [p["tool_call_id"] for p in shown.json()["pending"]] == ["w5"]
                assert "write Q3 and prod-db" not in shown.text
                events = await http.get(f"/v1/conversations/{sid}/events", headers=auth(lead_token))
                assert events.status_code == 404  # the conversation's events are not lead's
                # Deciding anything but the escalated call is refused.
                other = await http.post(
                    f"/v1/conversations/{sid}/decisions",
                    json={"decisions": [{"tool_call_id": "w6", "action": "approve"}]},
                    headers=auth(lead_token),
                )
                assert other.status_code == 422, other.text
                assert "lead may decide only the calls escalated to them (w5)" in other.text

                remember = await http.post(
                    f"/v1/conversations/{sid}/decisions",
                    json={
                        "decisions": [{"tool_call_id": "w5", "action": "approve", "remember": True}]
                    },
                    headers=auth(lead_token),
                )
                assert remember.status_code == 422 and "one by one" in remember.text
                escalated = [b for _, b in hook.requests if b["event"] == "escalated"]
                (link,) = [e for e in escalated[0]["links"] if e["user_id"] == "lead"]
                approve = base + link["approve"].removeprefix(PAGE)
                page = await http.get(approve)
                assert page.status_code == 200 and "Q3" in page.text, page.text
                assert runs_in(sid, "write_record") == []
                used = await http.post(approve)
                assert used.status_code == 200, used.text
                assert "You approved write_record; it ran: success." in used.text
                assert [r["title"] for r in runs_in(sid, "write_record")] == ["Q3"]
                state = await conversations.state(sid, "alice")
                assert state.pending == [] and state.last_turn is not None
                assert state.last_turn.reply == "Wrote Q3 as the lead approved."
                (decided,) = [e for e in state.audit if e.event == "decided"]
                assert (decided.actor, decided.tool_call_id) == ("lead", "w5")
