"""The baseline for ``history_bytes.py``: a bare Temporal workflow doing the same round
trips as one confirmed Parley turn, and nothing else.

- ``send(text)`` (the update of the update-with-start): runs the ``bare_model`` activity
  with the message text; it returns a proposal with one tool call; the update returns
  the pending call.
- ``approve(call_id)`` (a second update): runs the ``bare_tool`` activity
  (``{"written": title}``), then ``bare_model`` again, which returns the reply text.

So: 1 update-with-start + 1 update, 3 activities, instant. No search attributes, no
summaries, no timers, no validators: what any Temporal workflow with those round trips
pays. The texts and arguments are the ones the Parley side of the benchmark uses.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import TOOL_ACTIVITY

PROPOSAL_TEXT = "I will write it."
REPLY_TEXT = "Written."
TOOL_NAME = "write_record"


def call_id(turn: int) -> str:
    """The tool call id of turn ``turn`` (1-based), the same on both sides: a model
    gives each call a fresh id."""
    return f"c{turn}"


TITLE = "Q3"

_TIMEOUT = timedelta(minutes=1)


@activity.defn(name="bare_model")
async def bare_model(request: dict[str, Any]) -> dict[str, Any]:
    """A fake model: proposes one tool call for a message, answers text after a result."""
    if "tool_result" in request:
        return {"content": REPLY_TEXT, "tool_calls": []}
    return {
        "content": PROPOSAL_TEXT,
        "tool_calls": [
            {"name": TOOL_NAME, "id": call_id(request["turn"]), "args": {"title": TITLE}}
        ],
    }


@activity.defn(name="bare_tool")
async def bare_tool(request: dict[str, Any]) -> dict[str, Any]:
    return {"written": request["args"]["title"]}


@workflow.defn(name="BareConversation")
class BareConversation:
    @workflow.init
    def __init__(self, start: dict[str, Any]) -> None:
        self._pending: dict[str, dict[str, Any]] = {}
        self._turns = 0
        self._ended = False
        # ``bench/recovery.py`` gives the tool Parley's heartbeat timeout and retry
        # policy (``parley.contracts.TOOL_ACTIVITY``); the other benchmarks pass neither.
        self._tool_options: dict[str, Any] = {}
        if start.get("tool_heartbeat_seconds"):
            self._tool_options = {
                "heartbeat_timeout": timedelta(seconds=start["tool_heartbeat_seconds"]),
                "retry_policy": TOOL_ACTIVITY.retry,
            }

    @workflow.run
    async def run(self, start: dict[str, Any]) -> None:
        await workflow.wait_condition(lambda: self._ended)

    @workflow.update
    async def send(self, text: str) -> dict[str, Any]:
        self._turns += 1
        proposal = await workflow.execute_activity(
            bare_model, {"text": text, "turn": self._turns}, start_to_close_timeout=_TIMEOUT
        )
        for call in proposal["tool_calls"]:
            self._pending[call["id"]] = call
        return {"status": "awaiting_approval", "pending": proposal["tool_calls"]}

    @workflow.update
    async def approve(self, call_id: str) -> dict[str, Any]:
        call = self._pending.pop(call_id)
        result = await workflow.execute_activity(
            bare_tool,
            {"name": call["name"], "args": call["args"]},
            start_to_close_timeout=_TIMEOUT,
            **self._tool_options,
        )
        reply = await workflow.execute_activity(
            bare_model,
            {"tool_call_id": call_id, "tool_result": result},
            start_to_close_timeout=_TIMEOUT,
        )
        return {"status": "completed", "reply": reply["content"]}

    @workflow.signal
    def end(self) -> None:
        self._ended = True
