"""``call_model``'s input and output, and the reference to the stored transcript."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from parley.contracts.instructions import WorkerInstructions
from parley.contracts.payloads import CompactAIMessage, Contract, Messages
from parley.contracts.tools import ToolCatalogue
from parley.contracts.usage import Usage


class ClientContext(Contract):
    """One piece of context a front end gives for a turn (AG-UI ``RunAgentInput.context``,
    and its ``state``): shown to the model in that turn's calls, never stored in the
    transcript; it is in history as ``call_model``'s input."""

    model_config = ConfigDict(extra="forbid")

    description: str
    value: str


class ClientTool(Contract):
    """A tool the front end runs itself (AG-UI ``RunAgentInput.tools``): offered to the
    model for that run; a call to it ends the run with the call, and the client answers
    it with a tool message in its next run. Not one of the worker's tools, so no gate:
    nothing of it runs on Parley's side."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    #: Its arguments' JSON schema.
    parameters: dict[str, Any] = Field(default_factory=dict)

    def as_openai_tool(self) -> dict[str, Any]:
        """The form ``bind_tools`` takes (OpenAI's function tool)."""
        schema = self.parameters or {"type": "object", "properties": {}}
        function = {"name": self.name, "description": self.description, "parameters": schema}
        return {"type": "function", "function": function}


class ClientToolResult(Contract):
    """The front end's answer to a call of one of its tools (an AG-UI tool message)."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: str
    content: str


class Compaction(Contract):
    """What the model sees in place of the transcript's first ``covers`` messages: a
    summary of them, written by a model call (``compact_context``). The messages stay
    whole in the chain; only the model's view is shorter."""

    covers: int
    summary: str
    #: The model's view before and after, in tokens (as the worker counts them).
    tokens_before: int
    tokens_after: int
    #: What the summarizing model call used (counted with the conversation's usage).
    usage: Usage | None = None


class ContextRef(Contract):
    """Where the model's transcript so far is stored (``parley.storage``'s chain): the
    store's small claim (every process uses the one ``PARLEY_PAYLOAD_STORE``) and how
    many messages it covers, and the latest compaction of the model's view of it."""

    claim: dict[str, str]
    length: int
    compaction: Compaction | None = None


class CompactContextInput(Contract):
    """``compact_context``: the stored transcript, the messages not yet stored, and
    whether a first compaction was not enough (the provider still refused)."""

    context: ContextRef | None = None
    new_messages: Messages = Field(default_factory=list)
    harder: bool = False
    #: The system message of the conversation's model calls (the agent's instructions):
    #: counted in the view, never summarized.
    instructions: str | None = None
    #: The model the summary is written by (``CallModelInput.model``).
    model: str | None = None


class CallModelInput(Contract):
    """Bounded whatever the conversation's length: the transcript so far travels as a
    reference, only the messages added since the previous model call as values."""

    context: ContextRef | None = None
    new_messages: Messages = Field(default_factory=list)
    #: Set on the first model call of each turn: the version of the tool catalogue the
    #: workflow holds ("" for none). The reply carries the worker's catalogue when it
    #: differs. None (later calls of a turn): no check; a deploy is seen next turn.
    catalogue_version: str | None = None
    #: Set when a subagent's conversation calls: the model is offered only the tools
    #: that subagent may use (the worker's own definition of it).
    subagent: str | None = None
    #: The front end's context for this turn (``ClientContext``), shown to the model
    #: after the system prompt and never stored in the transcript.
    client_context: list[ClientContext] = Field(default_factory=list)
    #: The front end's own tools for this turn (``ClientTool``), offered besides the
    #: worker's (never to a subagent).
    client_tools: list[ClientTool] = Field(default_factory=list)
    #: How many times the conversation was rewound: the reply's call ids are made
    #: unique across every rewind (``REWOUND_CALL_ID``), not only in the transcript.
    rewinds: int = 0
    #: The system message of every model call: the agent's instructions as this run
    #: keeps them, and what the conversation added (``parley.contracts.instructions``).
    instructions: str | None = None
    #: The run has not learned the instructions yet: the worker uses its own (with
    #: ``added_instructions``, refused where it does not allow them) and reports them.
    ask_instructions: bool = False
    added_instructions: str | None = None
    #: Which of the models ``PARLEY_MODEL`` lists the call uses (its spec), as the
    #: workflow chose it (``parley.contracts.failover``); None: the worker's first.
    model: str | None = None


class CallModelOutput(Contract):
    #: None when the model's view would pass the worker's context budget: the model was
    #: not called, ``context`` holds the new messages, and ``over_budget`` says by how
    #: much; the workflow compacts (``compact_context``) and calls again.
    message: CompactAIMessage | None = None
    over_budget: int | None = None
    #: The transcript including ``message``.
    context: ContextRef
    catalogue: ToolCatalogue | None = None
    #: The worker's instructions, when the call asked (``ask_instructions``).
    instructions: WorkerInstructions | None = None
    #: The model that answered (its spec), where the worker lists several: usage is
    #: counted per model. None on a worker with one model.
    model: str | None = None


class StreamDelta(Contract):
    """``stream_delta``: the text a model call in flight produced since its previous
    batch. Each attempt of ``call_model`` streams under its own message id (the id its
    reply will have), numbering its batches from 1, so the workflow can tell a retried
    attempt's text from the first's and a repeated batch from a new one."""

    message_id: str
    sequence: int = Field(ge=1)
    text: str
