"""Reverts and undos over AG-UI (``POST /agui``), through the real gateway in front of a
real worker, dev server and plans service; the model is a script.

- Each ``TOOL_CALL_RESULT`` says in ``metadata.parley.revertible`` whether its call may
  be reverted: a created plan may, its inverse (``delete_plan``) may not; a
  reconnect's ``MESSAGES_SNAPSHOT`` marks each tool message the same way.
- With the official ``@ag-ui/client`` HttpAgent, a run whose ``forwardedProps`` is
  ``{"parley": {"revert": "c1"}}`` ends with the inverse as an interrupt (nothing is
  deleted yet); a reloaded page gets that interrupt back, resumes it with an approval,
  and the plan's row is gone.
- A revert that cannot be, and a malformed ``forwardedProps.parley``, are refused (422)
  in one line before any stream.
- ``{"parley": {"undo": "c1"}}`` while the approval's run waits out the call's undo
  window takes it back: that run's ``RUN_FINISHED`` says ``{"undone": ["c1"]}``, the
  approval's run ends with the call undone, and the service never saw the create.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from ag_ui.core import Event
from pydantic import TypeAdapter

from parley.activities.toolsets.plans import build_plans_toolset
from parley.contracts import PolicyRule
from parley.tools import ToolRegistry
from tests.support import call, script
from tests.support.agui_client import run_agui_session
from tests.support.gateway import ALICE_TOKEN, SseEvent, auth, serve_gateway, sse_events
from tests.support.plans import PLANS_KEY, plans_registry, rows, seen_requests
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

ALICE = auth(ALICE_TOKEN)
AG_UI_EVENT = TypeAdapter(Event)
TITLE = "Q4 roadmap"
#: The scripted model answers by the count of assistant messages, and a revert's
#: proposal is one (Parley's own): this entry stands for it and is never asked for.
PARLEY_PROPOSES = {"content": "(Parley proposes the inverse)"}


def planning_model():
    return script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Created."},
        PARLEY_PROPOSES,
        {"content": "Deleted it again."},
    )


def check_complete_run(events: list[SseEvent], run_id: str) -> None:
    """One run, every event valid for ag-ui-protocol's models, from RUN_STARTED to
    RUN_FINISHED with the caller's run id."""
    for event in events:
        AG_UI_EVENT.validate_python(event.data)
    kinds = [e.type for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    assert kinds.count("RUN_STARTED") == 1 and kinds.count("RUN_FINISHED") == 1, kinds
    assert events[0].data["runId"] == events[-1].data["runId"] == run_id


def revertible(result: dict[str, Any]) -> bool:
    return result["metadata"]["parley"]["revertible"]


async def agui(http: httpx.AsyncClient, run: dict[str, Any]) -> list[SseEvent]:
    async with http.stream("POST", "/agui", json=run, headers=ALICE) as stream:
        assert stream.status_code == 200, await stream.aread()
        return [event async for event in sse_events(stream)]


async def refused(http: httpx.AsyncClient, run: dict[str, Any], status: int = 422) -> str:
    """The one-line message of a run refused before any stream."""
    answer = await http.post("/agui", json=run, headers=ALICE)
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]["message"]
    assert "\n" not in message and "pydantic" not in message
    return message


async def test_the_official_client_reverts_a_created_plan_and_approves_its_inverse(
    agui_client, parley_worker, plans
) -> None:
    sid = new_session()
    revert = {"parley": {"revert": "c1"}}
    steps = [
        {"agent": "page", "runId": "r-ask", "text": "plan Q4"},
        {"agent": "page", "runId": "r-approve", "resume": "approve"},
        {"agent": "page", "runId": "r-revert", "forwardedProps": revert},
    ]
    async with (
        parley_worker(plans_registry(plans), planning_model()) as conversations,
        serve_gateway(conversations) as url,
    ):
        asked, approved, reverted = await run_agui_session(url, ALICE_TOKEN, sid, steps)
        assert [step.error for step in (asked, approved, reverted)] == [None, None, None]
        (created,) = approved.of_type("TOOL_CALL_RESULT")
        assert created["toolCallId"] == "c1" and revertible(created) is True
        assert [r["title"] for r in rows(plans, "alice")] == [TITLE]

        # The inverse arrives as an interrupt, like any call that waits; nothing ran.
        (interrupt,) = reverted.pending_interrupts
        assert interrupt["id"] == interrupt["toolCallId"] == "revert-c1"
        (proposed,) = reverted.of_type("TOOL_CALL_START")
        assert proposed["toolCallName"] == "delete_plan"
        assert reverted.of_type("RUN_FINISHED")[0]["runId"] == "r-revert"
        assert [r["title"] for r in rows(plans, "alice")] == [TITLE]

        # A reloaded page gets the interrupt back and approves it.
        steps = [
            {"agent": "reloaded", "runId": "r-reconnect"},
            {"agent": "reloaded", "runId": "r-delete", "resume": "approve"},
        ]
        reconnected, deleted = await run_agui_session(url, ALICE_TOKEN, sid, steps)
        assert [i["id"] for i in reconnected.pending_interrupts] == ["revert-c1"]
        assert deleted.error is None, deleted.error
        (inverse,) = deleted.of_type("TOOL_CALL_RESULT")
        assert inverse["toolCallId"] == "revert-c1" and '"success"' in inverse["content"]
        assert revertible(inverse) is False  # delete_plan declares no inverse
        assert rows(plans, "alice") == []


async def test_reverts_that_cannot_be_and_malformed_requests_are_one_line(
    parley_worker, plans
) -> None:
    async with (
        parley_worker(plans_registry(plans), planning_model()) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        user = {"id": "m1", "role": "user", "content": "plan Q4"}
        await agui(http, {"threadId": sid, "runId": "r-1", "messages": [user]})
        resume = [{"interruptId": "c1", "status": "resolved", "payload": True}]
        approved = await agui(
            http, {"threadId": sid, "runId": "r-2", "messages": [user], "resume": resume}
        )
        check_complete_run(approved, "r-2")
        (result,) = [e.data for e in approved if e.type == "TOOL_CALL_RESULT"]
        assert revertible(result) is True

        async def reconnect_marks() -> dict[str, bool]:
            """A reconnect's MESSAGES_SNAPSHOT: each tool result's mark, by call id."""
            back = await agui(http, {"threadId": sid, "runId": "r-back", "messages": []})
            (snapshot,) = [e.data for e in back if e.type == "MESSAGES_SNAPSHOT"]
            tools = [m for m in snapshot["messages"] if m["role"] == "tool"]
            return {m["toolCallId"]: revertible(m) for m in tools}

        assert await reconnect_marks() == {"c1": True}

        def asking(props: Any, **more: Any) -> dict[str, Any]:
            return {
                "threadId": sid,
                "runId": "r-x",
                "messages": [],
                "forwardedProps": props,
                **more,
            }

        unknown = await refused(http, asking({"parley": {"revert": "nope"}}))
        assert unknown.startswith("nope did not run successfully")
        misspelt = await refused(http, asking({"parley": {"rever": "c1"}}))
        assert misspelt.startswith('forwardedProps.parley is {"revert": CALL_ID}')
        assert misspelt.endswith("got the keys rever")
        not_an_id = await refused(http, asking({"parley": {"revert": 7}}))
        assert not_an_id.startswith("forwardedProps.parley.revert must name a call by its id")
        both = await refused(http, asking({"parley": {"undo": "c1"}}, resume=resume))
        assert "not both" in both
        assert [r["title"] for r in rows(plans, "alice")] == [TITLE]  # nothing ran

        # The revert itself, streamed: a whole run that ends in the inverse's interrupt.
        reverted = await agui(http, asking({"parley": {"revert": "c1"}, "app": {"x": 1}}))
        check_complete_run(reverted, "r-x")
        (inverse,) = reverted[-1].data["outcome"]["interrupts"]
        assert inverse["id"] == "revert-c1"
        again = await refused(http, asking({"parley": {"revert": "c1"}}), 409)
        assert "decide the calls that wait first" in again
        assert await reconnect_marks() == {"c1": False}  # its inverse is proposed


async def test_an_undo_over_agui_takes_back_a_call_in_its_window(parley_worker, plans) -> None:
    rule = PolicyRule(name="plans-undoable", tool="create_plan", decide="confirm", undo_seconds=600)
    registry = ToolRegistry(build_plans_toolset(plans.url, PLANS_KEY), rules=[rule])
    model = script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Understood."},
    )
    async with (
        parley_worker(registry, model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        user = {"id": "m1", "role": "user", "content": "plan Q4"}
        await agui(http, {"threadId": sid, "runId": "r-1", "messages": [user]})
        resume = [{"interruptId": "c1", "status": "resolved", "payload": True}]
        approving = asyncio.create_task(
            agui(http, {"threadId": sid, "runId": "r-2", "messages": [user], "resume": resume})
        )

        async def scheduled() -> list[str]:
            state = await conversations.state(sid, "alice")
            return [s.tool_call_id for s in state.scheduled]

        await eventually(scheduled, what="c1 waiting out its undo window")
        undo = {"parley": {"undo": "c1"}}
        undone = await agui(
            http, {"threadId": sid, "runId": "r-undo", "messages": [], "forwardedProps": undo}
        )
        check_complete_run(undone, "r-undo")
        assert undone[-1].data["result"] == {"undone": ["c1"]}

        approved = await approving
        check_complete_run(approved, "r-2")
        (result,) = [e.data for e in approved if e.type == "TOOL_CALL_RESULT"]
        assert '"rejected"' in result["content"] and "undid this call" in result["content"]
        assert revertible(result) is False
        assert rows(plans, "alice") == []
        assert not [r for r in seen_requests(plans) if r["method"] == "POST"]
        late = await refused(
            http, {"threadId": sid, "runId": "r-late", "messages": [], "forwardedProps": undo}
        )
        assert late.startswith("c1 is not in an undo window")
