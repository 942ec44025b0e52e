"""Talking to conversations from outside Temporal: the CLI, the gateway and tests.

Client side (never imported by workflows). One module per job:

- ``conversations``: ``Conversations``, the one client API every caller uses (send,
  decide, state, events, end);
- ``forks``: ``fork`` and ``rewind`` (functions of a ``Conversations``): go on from a
  conversation's first N messages, in a new conversation or in a new run of the same;
- ``starts``: a new conversation's start input and options, for a first message and a
  fork alike;
- ``stored``: what a conversation stored in the payload store, read back, and the one
  line when retention deleted it (``DeletedByRetention``, saying when);
- ``results``: one tool call's result, whole (``whole_result``: ``parley result``,
  ``GET …/results/{call_id}``), however much of it the model read;
- ``visibility``: listing conversations from Temporal's visibility, no worker needed;
- ``inbox``: every call waiting on a user across conversations (no worker needed), and
  identical calls decided at once, each in its own conversation;
- ``policy_evidence``: the audit and call arguments ``parley policies suggest`` reads;
- ``liveness``: never wait on a task queue no worker serves;
- ``connection``: connecting to the cluster, with a one-line answer when it cannot;
- ``errors``: ``ConversationRefused`` and the translation of Temporal failures;
- ``reverts``: ``revert``, a call that ran taken back by its tool's inverse;
- ``previews``: a pending call's preview as lines to read (the CLI, the link page; the
  page's ``dom.js`` renders the same).
"""

from __future__ import annotations

from parley.client.connection import _connect_reason, connect
from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused, check_identity
from parley.client.forks import Forked, Rewound, fork, rewind
from parley.client.liveness import POLLER_FRESH_SECONDS
from parley.client.visibility import ConversationSummary

__all__ = [
    "POLLER_FRESH_SECONDS",
    "ConversationRefused",
    "ConversationSummary",
    "Conversations",
    "Forked",
    "Rewound",
    "_connect_reason",
    "check_identity",
    "connect",
    "fork",
    "rewind",
]
