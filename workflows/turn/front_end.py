"""What the front end gives a turn: its context (shown to the model in that turn's
calls) and its own tools (AG-UI ``RunAgentInput.tools``, as CopilotKit sends them).
Workflow side (deterministic, and no activity: nothing of these tools runs on Parley's
side).

A run's client tools are offered to the model besides the worker's
(``CallModelInput.client_tools``). A call of one is not triaged: no rule, decision or
worker check applies, since Parley runs nothing. Its ``TOOL_CALL_*`` events reach the
client, the call waits in ``ConversationState.client_calls`` (audited ``proposed``,
``client_tool``), and the turn ends (``RUN_FINISHED``) once nothing else is owed: the
model is not called while such a call waits. The client's next run answers it with a
tool message (``SendMessageInput.tool_results``), which enters the transcript as the
call's tool message (audited ``ran``, by ``client``), and the model goes on. A message
that comes without the answers first answers the waiting calls with an error the model
reads (the front end gave no result), so no call of the transcript stays unanswered.

The gate refuses a client tool named like one of the worker's tools or a subagent
(``gate.check_client_run``): a call of it would look gated to every reader and not be.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parley.contracts import (
        ClientContext,
        ClientTool,
        ClientToolResult,
        ConversationState,
        DecideInput,
        SendMessageInput,
        ToolCall,
        ToolResult,
        args_hash,
    )
    from parley.contracts.busy import QueuedMessage
    from parley.contracts.errors import ErrorType
    from parley.workflows.record.ledger import Ledger, error_result

#: A request that may come from a front end: its run id, context and tools.
ClientRequest = SendMessageInput | DecideInput | QueuedMessage

#: What the model reads for a call of a front-end tool its client never answered.
NO_RESULT = (
    "the user's application did not run {name} or gave no result for it before the "
    "next message; do not assume it ran"
)


class FrontEnd:
    """What the front end gave the turn in flight (its context and tools), and the one
    owner of ``ConversationState.client_calls``."""

    def __init__(self, state: ConversationState, ledger: Ledger) -> None:
        self._state = state
        self._ledger = ledger
        #: The turn in flight's (its request's ``context`` and ``client_tools``).
        self.context: list[ClientContext] = []
        self.offered: list[ClientTool] = []

    def begin_turn(self, request: ClientRequest | None) -> None:
        self.context = list(request.context) if request else []
        self.offered = list(request.client_tools) if request else []

    def owns(self, name: str) -> bool:
        return any(tool.name == name for tool in self.offered)

    @property
    def waiting(self) -> bool:
        return bool(self._state.client_calls)

    def hold(self, call: ToolCall) -> None:
        """A model's call of a front-end tool: it waits for the client's result."""
        detail = {"args_hash": args_hash(call.args), "client_tool": True}
        self._ledger.audit("proposed", "model", call.tool_call_id, call.name, detail)
        self._state.client_calls.append(call)

    def take(self, message: SendMessageInput) -> None:
        """Before a message's turn: its tool results answer the waiting calls; with none,
        the waiting calls are answered as never run (the gate checked the results)."""
        if message.tool_results:
            self.answer(message.tool_results, message.user_id)
        self.abandon()

    def answer(self, results: list[ClientToolResult], by: str) -> None:
        """The client's results (the gate checked each names a waiting call, once)."""
        waiting = {call.tool_call_id: call for call in self._state.client_calls}
        for given in results:
            call = waiting.pop(given.tool_call_id)
            result = ToolResult(status="success", content=given.content)
            self._ledger.answer(call, result, "ran", {"client_tool": True}, actor=by)
        self._state.client_calls = list(waiting.values())

    def abandon(self) -> None:
        """A message came without the results: each waiting call is answered so."""
        for call in self._state.client_calls:
            result = error_result(ErrorType.NOT_RUN, NO_RESULT.format(name=call.name))
            self._ledger.answer(call, result, "failed", {"client_tool": True})
        self._state.client_calls = []

    def forget(self) -> None:
        """A rewind cut away the messages that made the waiting calls: none is owed."""
        self._state.client_calls = []
