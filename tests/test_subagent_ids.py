"""Ids that cannot collide: a subagent's call and its parent's were both ``c1``, so a
second approval got the first one's update id and its old result.

Here every model proposes ``c1``: the parent in each round, and each of its three
subagent conversations (two subagents, one of them twice). A subagent's call is
approved from the parent through the page (Chromium), the CLI and ``/agui``; each runs
once, and every call id and assistant message id of the conversation and its subagents
is distinct. Real worker, gateway and dev server; the models are scripts.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from playwright.async_api import Page, expect

from parley.client import ConversationRefused
from parley.contracts import ASSISTANT_MESSAGE_PREFIX, SubagentSpec
from parley.contracts.errors import ErrorType
from parley.tools import ToolRegistry, confirm
from tests.support import ByConversation, call, script
from tests.support.browser import sign_in_and_start
from tests.support.cli import parley_against
from tests.support.gateway import ALICE_TOKEN, TOKENS, auth, serve_gateway, sse_events
from tests.support.policy_tools import create_plan, push_branch
from tests.support.transcripts import runs_in

PARLEY = [str(Path(sys.executable).parent / "parley")]
PLANNER = SubagentSpec(name="planner", description="Records plans.", tools=["create_plan"])
PUSHER = SubagentSpec(name="pusher", description="Pushes branches.", tools=["push_branch"])


def registry() -> ToolRegistry:
    return ToolRegistry([confirm(push_branch), confirm(create_plan)], subagents=[PLANNER, PUSHER])


def model(tag: str) -> ByConversation:
    """The parent proposes ``c1`` in each round, and so does each subagent."""
    tasks = {n: f"task {n} of {tag}" for n in ("one", "two", "three")}
    return ByConversation(
        scripts={
            "round one": script(
                {"tool_calls": [call("planner", "c1", task=tasks["one"])]},
                {"content": "Round one done."},
                {"tool_calls": [call("pusher", "c1", task=tasks["two"])]},
                {"content": "Round two done."},
                {"tool_calls": [call("planner", "c1", task=tasks["three"])]},
                {"content": "Round three done."},
            ),
            tasks["one"]: script(
                {"tool_calls": [call("create_plan", "c1", title="Q1")]}, {"content": "Q1 done."}
            ),
            tasks["two"]: script(
                {"tool_calls": [call("push_branch", "c1", branch="feat/x")]},
                {"content": "Pushed."},
            ),
            tasks["three"]: script(
                {"tool_calls": [call("create_plan", "c1", title="Q3")]}, {"content": "Q3 done."}
            ),
        }
    )


async def test_a_subagents_call_is_approved_from_the_parent_on_every_surface(
    parley_worker,
    client,
    page: Page,
) -> None:
    sid = f"web-{uuid.uuid4().hex[:10]}"
    async with (
        parley_worker(registry(), model(sid)) as conversations,
        serve_gateway(conversations, TOKENS) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        try:
            # Round one, on the page: the subagent's call waits on the parent's list.
            await sign_in_and_start(page, base, sid)
            await page.get_by_test_id("message-input").fill("round one")
            await page.get_by_test_id("send").click()
            card = page.get_by_test_id("approval-card")
            await expect(card).to_have_attribute("data-tool-call-id", "sub-planner-1-c1")
            await card.get_by_test_id("approve").click()
            await expect(page.get_by_test_id("transcript")).to_contain_text("Round one done.")
        finally:
            await page.goto("about:blank")
        assert [r["title"] for r in runs_in(f"{sid}/planner-1", "create_plan")] == ["Q1"]

        # Round two, by /agui: the interrupt is the subagent's call; the resume runs it.
        run = {
            "threadId": sid,
            "runId": "run-two",
            "messages": [{"id": "m1", "role": "user", "content": "round two"}],
        }
        async with http.stream("POST", "/agui", json=run, headers=auth(ALICE_TOKEN)) as stream:
            events = [e async for e in sse_events(stream)]
        [interrupt] = events[-1].data["outcome"]["interrupts"]
        assert interrupt["id"] == "sub-pusher-2-c1"
        resume = {
            "threadId": sid,
            "runId": "run-two-resumed",
            "messages": [],
            "resume": [
                {
                    "interruptId": interrupt["id"],
                    "status": "resolved",
                    "payload": {"action": "approve"},
                }
            ],
        }
        async with http.stream("POST", "/agui", json=resume, headers=auth(ALICE_TOKEN)) as stream:
            events = [e async for e in sse_events(stream)]
        assert events[-1].data["type"] == "RUN_FINISHED", events[-1].data
        assert [r["branch"] for r in runs_in(f"{sid}/pusher-2", "push_branch")] == ["feat/x"]

        # Round three, by the CLI. The same decision as round one (approve, c1): it must
        # not be answered with round one's result.
        turn = await conversations.send(sid, "alice", "round three")
        assert [p.tool_call_id for p in turn.pending] == ["sub-planner-3-c1"]
        approved = await parley_against(
            conversations, client, "approve", "--session", sid, "--user", "alice"
        )
        assert approved.returncode == 0, approved.stderr
        assert "Round three done." in approved.stdout
        assert [r["title"] for r in runs_in(f"{sid}/planner-3", "create_plan")] == ["Q3"]

        # Each call ran once, and every id of the conversation and its subagents differs.
        ids: list[str] = []
        messages: list[str] = []
        for session in (sid, f"{sid}/planner-1", f"{sid}/pusher-2", f"{sid}/planner-3"):
            state = await conversations.state(session, "alice")
            for message in state.transcript:
                if isinstance(message, AIMessage):
                    ids += [c["id"] for c in message.tool_calls]
                    messages.append(message.id or "")
                elif isinstance(message, ToolMessage):
                    assert message.tool_call_id in ids
        assert len(ids) == 6 and len(set(ids)) == 6, ids
        assert all(m.startswith(ASSISTANT_MESSAGE_PREFIX) for m in messages), messages
        assert len(set(messages)) == len(messages)
        assert (
            runs_in(f"{sid}/planner-1", "create_plan")[0]["key"]
            != (runs_in(f"{sid}/planner-3", "create_plan")[0]["key"])
        )


async def test_a_client_cannot_take_an_assistant_message_id(parley_worker) -> None:
    async with parley_worker(registry(), model("ids")) as conversations:
        with pytest.raises(ConversationRefused) as refused:
            taken = f"{ASSISTANT_MESSAGE_PREFIX}1"
            await conversations.send(f"s-{uuid.uuid4().hex[:8]}", "alice", "hi", message_id=taken)
        assert "are the assistant's; choose another message id" in refused.value.message
        assert refused.value.error_type == ErrorType.INVALID_MESSAGE
