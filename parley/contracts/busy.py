"""Messages that arrive while a turn runs: what the sender asks for (``WhileBusy``) and
the messages that wait for a turn (``QueuedMessage``, carried in ``ConversationState``).
Contracts (both sides of the Temporal boundary); the logic is ``parley.workflows.turn.busy``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import Field

from parley.contracts.model import ClientContext, ClientTool
from parley.contracts.payloads import Contract

#: What a message that arrives while a turn runs does:
#: ``reject`` — refused with ``TurnInProgress`` (the default);
#: ``enqueue`` — it becomes the next turn, in order, applied once;
#: ``interrupt`` — the model call in flight (never a tool) is cancelled and the model is
#: called again with the message added.
WhileBusy = Literal["reject", "enqueue", "interrupt"]
WHILE_BUSY_MODES: tuple[str, ...] = get_args(WhileBusy)

#: How many messages may wait for a turn. Each holds its update open until the turn
#: that answers it ends, and Temporal admits only 10 updates in flight per workflow by
#: default (the turn's own update and the gateway's followers need some of them).
QUEUED_MESSAGES_MAX = 4


class QueuedMessage(Contract):
    """A message waiting for a turn (``enqueue``), or for the model call it interrupts
    to be cancelled or the next one to start (``interrupt``)."""

    #: The update that sent it (``message-<message_id>`` from ``parley``'s client): its
    #: result is the result of the turn that answers the message.
    update_id: str
    message_id: str
    text: str
    user_id: str
    while_busy: Literal["enqueue", "interrupt"]
    queued_at: datetime
    #: The client's run id and context for the turn it starts (``SendMessageInput``);
    #: an interrupting message joins the running turn, whose run id and context stay.
    run_id: str | None = None
    context: list[ClientContext] = Field(default_factory=list)
    client_tools: list[ClientTool] = Field(default_factory=list)
