"""Talking to conversations from outside Temporal: the CLI, the gateway and tests.

Client side (never imported by workflows). One module per job:

- ``conversations``: ``Conversations``, the one client API every caller uses (send,
  decide, state, events, end);
- ``visibility``: listing conversations from Temporal's visibility, no worker needed;
- ``liveness``: never wait on a task queue no worker serves;
- ``connection``: connecting to the cluster, with a one-line answer when it cannot;
- ``errors``: ``ConversationRefused`` and the translation of Temporal failures.
"""

from __future__ import annotations

from parley.client.connection import _connect_reason, connect
from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused, check_identity
from parley.client.liveness import POLLER_FRESH_SECONDS
from parley.client.visibility import ConversationSummary

__all__ = [
    "POLLER_FRESH_SECONDS",
    "ConversationRefused",
    "ConversationSummary",
    "Conversations",
    "_connect_reason",
    "check_identity",
    "connect",
]
