"""End to end: AG-UI for a CopilotKit front end, with the official ``@ag-ui/client``
HttpAgent (tests/js, pinned, ``npm ci``) against the real gateway, a real worker and the
dev server:

- a page reloaded while a call waits gets the thread's messages and the open interrupt
  back (a run with no messages: ``MESSAGES_SNAPSHOT`` and ``RUN_FINISHED`` with the
  interrupt), and resumes it: the call runs once;
- the event log's run ids are the ones the client gave, and a run id used before is
  refused (422) before anything runs;
- the run's ``context`` and ``state`` reach the model (the offline scripted model
  repeats them) and stay out of the transcript;
- a front-end tool (``RunAgentInput.tools``) is offered to the model, its call ends the
  run, and the client's tool message in the next run answers it; no gate applies and
  nothing runs on Parley's side, a front-end tool cannot take a worker tool's name, and
  a call its client never answers is answered as never run.
"""

from __future__ import annotations

import httpx
import pytest

from parley.activities.models.scripted import ScriptedChatModel
from parley.client import ConversationRefused
from parley.contracts.errors import ErrorType
from tests.support import OFFERED, RUNS, ByConversation, call, registry, runs_of, script
from tests.support.agui_client import run_agui_session
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.transcripts import new_session

ALICE = auth(ALICE_TOKEN)


async def stored_run_ids(conversations, sid: str) -> list[str]:
    page = await conversations.events(sid, "alice", limit=5_000)
    return [i.event["runId"] for i in page.events if i.event["type"] == "RUN_STARTED"]


async def test_a_reloaded_page_gets_the_thread_back_and_resumes_its_interrupt(
    agui_client, parley_worker
) -> None:
    RUNS.clear()
    propose = {
        "content": "I will write it.",
        "tool_calls": [call("write_record", "c1", title="Q3")],
    }
    model = script(propose, {"content": "Written."})
    sid = new_session()
    steps = [
        {"agent": "before-reload", "runId": "r-ask", "text": "write the Q3 record"},
        {"agent": "after-reload", "runId": "r-reconnect"},
        {"agent": "after-reload", "runId": "r-resume", "resume": "approve"},
    ]
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as url,
    ):
        asked, reconnected, resumed = await run_agui_session(url, ALICE_TOKEN, sid, steps)
        stored = await stored_run_ids(conversations, sid)

    assert asked.error is None and [i["id"] for i in asked.pending_interrupts] == ["c1"]
    # The reloaded agent knew nothing; the reconnecting run told it the thread and the call.
    assert reconnected.error is None, reconnected.error
    kinds = [e["type"] for e in reconnected.events]
    assert kinds == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"], kinds
    roles = [(m["role"], m.get("content")) for m in reconnected.messages]
    assert (
        roles[0] == ("user", "write the Q3 record") and ("assistant", "I will write it.") in roles
    )
    (assistant,) = [m for m in reconnected.messages if m["role"] == "assistant"]
    assert [c["id"] for c in assistant["toolCalls"]] == ["c1"]
    (interrupt,) = reconnected.pending_interrupts
    assert interrupt["id"] == "c1" and interrupt["toolCallId"] == "c1"
    assert "responseSchema" in interrupt  # the same interrupt the first run raised
    # ...and resumed it: the call ran once, with the arguments that were shown.
    assert resumed.error is None, resumed.error
    assert [run["title"] for run in runs_of("write_record")] == ["Q3"]
    (result,) = resumed.of_type("TOOL_CALL_RESULT")
    assert result["toolCallId"] == "c1" and '"success"' in result["content"]
    assert resumed.pending_interrupts == []
    assert [m["content"] for m in resumed.messages if m["role"] == "assistant"][-1] == "Written."
    # Run ids: what each client saw live is what the log keeps (a reconnect runs nothing).
    live = [step.of_type("RUN_STARTED")[0]["runId"] for step in (asked, reconnected, resumed)]
    assert live == ["r-ask", "r-reconnect", "r-resume"]
    assert stored == ["r-ask", "r-resume"]
    assert [step.of_type("RUN_FINISHED")[0]["runId"] for step in (asked, resumed)] == [
        "r-ask",
        "r-resume",
    ]


async def test_context_and_state_reach_the_model_and_stay_out_of_the_transcript(
    agui_client, parley_worker
) -> None:
    sid = new_session()
    context = [{"description": "the page the user is on", "value": "plans/42"}]
    steps = [
        {
            "agent": "page",
            "runId": "r-context",
            "text": "what context do you have?",
            "context": context,
            "state": {"theme": "dark"},
        },
        {"agent": "page", "runId": "r-bare", "text": "and now, what context?"},
    ]
    async with (
        parley_worker(registry(), ScriptedChatModel()) as conversations,
        serve_gateway(conversations) as url,
    ):
        with_context, without = await run_agui_session(url, ALICE_TOKEN, sid, steps)
        transcript = await conversations.transcript(sid, "alice")

    assert with_context.error is None, with_context.error
    reply = [m for m in with_context.messages if m["role"] == "assistant"][-1]["content"]
    assert "- the page the user is on: plans/42" in reply, reply
    assert '"theme": "dark"' in reply, reply
    # Context is the run's: the next run gave none (the agent still sends its state,
    # as HttpAgent does every run), and nothing of either was stored.
    later = [m for m in without.messages if m["role"] == "assistant"][-1]["content"]
    assert "plans/42" not in later and '"theme": "dark"' in later, later
    assert [m.type for m in transcript] == ["human", "ai", "human", "ai"]  # no context stored


async def test_a_run_id_used_before_is_refused_before_anything_runs(parley_worker) -> None:
    RUNS.clear()
    model = script(
        {"content": "", "tool_calls": [call("write_record", "c1", title="A")]},
        {"content": "Written."},
    )
    sid = new_session()
    user = {"id": "m1", "role": "user", "content": "write A"}
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        first = {"threadId": sid, "runId": "same", "messages": [user], "tools": [], "context": []}
        first |= {"state": None, "forwardedProps": None}
        async with http.stream("POST", "/agui", json=first, headers=ALICE) as stream:
            assert stream.status_code == 200
            await stream.aread()
        resume = {
            **first,
            "resume": [{"interruptId": "c1", "status": "resolved", "payload": True}],
        }
        answer = await http.post("/agui", json=resume, headers=ALICE)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert (
            error["type"] == "InvalidDecision"
            and "run id 'same' was already used" in (error["message"])
        )
        assert "\n" not in error["message"]
        bad = await http.post("/agui", json={**resume, "runId": "no spaces"}, headers=ALICE)
        assert bad.status_code == 422 and "is not one a client may give" in bad.text
        assert runs_of("write_record") == []
        snapshot = await conversations.state(sid, "alice")
        assert [c.tool_call_id for c in snapshot.pending] == ["c1"]  # still waits


async def test_a_front_end_tool_whose_parameters_are_no_schema_object_is_refused(
    parley_worker,
) -> None:
    """AG-UI leaves a tool's ``parameters`` untyped: a front end tool whose parameters
    are ``true``, ``false``, a list or a string is refused in one line (422, which tool,
    what a schema looks like) before anything runs; the gateway answers the next run."""
    sid = new_session()
    user = {"id": "m1", "role": "user", "content": "celebrate"}
    async with (
        parley_worker(registry(), script({"content": "Done."})) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        for parameters in (True, False, ["color"], "object"):
            tool = {"name": "show_confetti", "description": "", "parameters": parameters}
            body = {"threadId": sid, "runId": "r1", "messages": [user], "tools": [tool]}
            body |= {"context": [], "state": None, "forwardedProps": None}
            answer = await http.post("/agui", json=body, headers=ALICE)
            assert answer.status_code == 422, (parameters, answer.text)
            error = answer.json()["error"]
            assert error["type"] == "InvalidRequest", error
            assert error["message"].startswith("tools[0]: parameters"), error
            assert "JSON Schema object" in error["message"] and "\n" not in error["message"]
        with pytest.raises(ConversationRefused) as refused:  # nothing was started
            await conversations.state(sid, "alice")
        assert refused.value.error_type == ErrorType.NOT_FOUND
        body["tools"] = []
        async with http.stream("POST", "/agui", json=body, headers=ALICE) as stream:
            assert stream.status_code == 200
            await stream.aread()


CONFETTI = {
    "name": "show_confetti",
    "description": "Show confetti on the user's page",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}},
}


async def test_a_front_end_tool_round_trip_skips_the_gate_and_runs_nothing_here(
    agui_client, parley_worker
) -> None:
    """CopilotKit's frontend action: the model is offered the client's tool, its call
    ends the run (no interrupt, nothing runs on Parley's side), the client answers
    with a tool message in its next run, and the model reads that answer."""
    RUNS.clear()
    sid = new_session()
    first = "celebrate the Q3 record"
    model = ByConversation(
        scripts={
            first: script(
                {
                    "content": "Here you go.",
                    "tool_calls": [call("show_confetti", "f1", color="blue")],
                },
                {"content": "The confetti was shown."},
            )
        }
    )
    OFFERED.clear()
    steps = [
        {"agent": "page", "runId": "r-call", "text": first, "tools": [CONFETTI]},
        {"agent": "page", "runId": "r-answer", "toolResult": "shown in blue", "tools": [CONFETTI]},
    ]
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as url,
    ):
        called, answered = await run_agui_session(url, ALICE_TOKEN, sid, steps)
        snapshot = await conversations.state(sid, "alice")

    assert called.error is None, called.error
    assert "show_confetti" in OFFERED[0][1] and "write_record" in OFFERED[0][1]
    (start,) = called.of_type("TOOL_CALL_START")
    assert start["toolCallName"] == "show_confetti" and start["toolCallId"] == "f1"
    finished = called.of_type("RUN_FINISHED")[0]
    assert finished["outcome"]["type"] == "success" and called.pending_interrupts == []
    assert answered.error is None, answered.error
    assert answered.of_type("TOOL_CALL_RESULT") != []
    assert [m["content"] for m in answered.messages if m["role"] == "assistant"][-1] == (
        "The confetti was shown."
    )
    assert RUNS == []  # nothing ran on Parley's side
    kinds = [m.type for m in snapshot.transcript]
    assert kinds == ["human", "ai", "tool", "ai"], kinds
    assert snapshot.transcript[2].content == "shown in blue"
    ran = [a for a in snapshot.audit if a.tool_call_id == "f1"]
    assert [(a.event, a.actor) for a in ran] == [("proposed", "model"), ("ran", "alice")]
    assert all(a.detail.get("client_tool") for a in ran)


async def test_front_end_tools_cannot_take_a_gated_tools_name_nor_leave_calls_open(
    parley_worker,
) -> None:
    """A client tool named like a worker tool is refused before anything runs; a
    message that comes instead of a tool result answers the open call as never run."""
    RUNS.clear()
    model = script(
        {"content": "", "tool_calls": [call("show_confetti", "f1", color="red")]},
        {"content": "Noted."},
    )
    sid = new_session()
    tool = {**CONFETTI}
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        run = {"threadId": sid, "runId": "a", "tools": [tool], "context": [], "state": None}
        run |= {"forwardedProps": None}
        user = {"id": "m1", "role": "user", "content": "celebrate"}
        async with http.stream(
            "POST", "/agui", json={**run, "messages": [user]}, headers=ALICE
        ) as s:
            assert s.status_code == 200
            await s.aread()
        shadow = {"name": "write_record", "description": "mine", "parameters": {}}
        other = {"id": "m2", "role": "user", "content": "write it"}
        answer = await http.post(
            "/agui",
            json={**run, "runId": "b", "tools": [shadow], "messages": [user, other]},
            headers=ALICE,
        )
        assert answer.status_code == 422, answer.text
        assert "front-end tool write_record" in answer.json()["error"]["message"]
        stray = {"id": "t9", "role": "tool", "toolCallId": "nope", "content": "x"}
        answer = await http.post(
            "/agui", json={**run, "runId": "c", "messages": [user, stray]}, headers=ALICE
        )
        assert answer.status_code == 422 and "the calls waiting are: f1" in answer.text
        async with http.stream(
            "POST", "/agui", json={**run, "runId": "d", "messages": [user, other]}, headers=ALICE
        ) as s:
            assert s.status_code == 200
            await s.aread()
        snapshot = await conversations.state(sid, "alice")
    (result,) = [m for m in snapshot.transcript if m.type == "tool"]
    assert result.tool_call_id == "f1" and "did not run show_confetti" in result.content
    assert [m.type for m in snapshot.transcript] == ["human", "ai", "tool", "human", "ai"]
    assert RUNS == []
