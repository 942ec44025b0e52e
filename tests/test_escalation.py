"""Escalation (issue 11): a policy rule says what happens to a call nobody decided on in
time: it expires (the default), is rejected with a reason the model reads, or is
escalated (another person is told through the webhook and the call waits as long
again, then expires). The deadline stays a durable timer: the real workflow runs on the
time-skipping test server, so hours pass in a moment."""

from __future__ import annotations

import uuid
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.contracts import PolicyRule
from parley.settings import Settings
from parley.worker import build_worker
from tests.support import call, registry
from tests.support.time_skipping import recording_script
from tests.support.transcripts import envelope_status, new_session, runs_in, tool_messages
from tests.support.webhook import Webhook

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
