"""The evidence ``parley policies suggest`` reads: the audit of a user's recent
conversations (every entry, as ``parley audit`` exports it) with each proposed call's
canonical arguments from the transcript, or exported audit files (``parley audit``'s
JSON lines, or ``GET …/audit?format=json``), verified before they are believed. Client
side (reads conversations through ``parley.client.Conversations``); the rules are made
by ``parley.tools.suggestions``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage

from parley.client.audit import ENTRY_FIELDS, BrokenExport, read_log, verify
from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused
from parley.client.stored import stored_messages
from parley.contracts import AuditEntry, StateQuery
from parley.contracts.errors import ErrorType

#: How many conversations are read at once.
READ_AT_ONCE = 4


@dataclass
class ConversationAudit:
    """One conversation's audit entries, and the canonical arguments of its proposed
    calls by call id (empty for an export, which carries their hashes only)."""

    session_id: str
    entries: list[AuditEntry]
    args: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Evidence:
    """What was read, and the conversations that could not be (each with why)."""

    audits: list[ConversationAudit]
    listed: int
    skipped: list[str] = field(default_factory=list)


async def recent_audits(
    conversations: Conversations, user_id: str, since: datetime, limit: int
) -> Evidence:
    """The audit of the ``limit`` conversations ``user_id`` owns or reviews that changed
    since ``since``, most recent first. One that cannot be read (its stored entries
    deleted by retention...) is skipped, saying why; with no worker to answer, the
    whole read is refused (every conversation would be)."""
    own = await conversations.list(user_id)
    reviewed = await conversations.list(user_id, reviewing=True)
    found = {c.session_id: c for c in [*own, *reviewed] if c.last_activity_at >= since}
    recent = sorted(found.values(), key=lambda c: c.last_activity_at, reverse=True)[:limit]
    turns = asyncio.Semaphore(READ_AT_ONCE)

    async def read(session_id: str) -> ConversationAudit | str:
        async with turns:
            try:
                return await conversation_audit(conversations, session_id, user_id)
            except ConversationRefused as refused:
                if refused.error_type == ErrorType.NO_WORKER:
                    raise
                return f"{session_id}: {refused.message}"

    read_ = await asyncio.gather(*(read(c.session_id) for c in recent))
    return Evidence(
        audits=[a for a in read_ if isinstance(a, ConversationAudit)],
        listed=len(recent),
        skipped=[a for a in read_ if isinstance(a, str)],
    )


async def conversation_audit(
    conversations: Conversations, session_id: str, user_id: str
) -> ConversationAudit:
    """Every audit entry of the conversation and the arguments of every call proposed
    in its transcript (older messages from the stored chain; those retention deleted
    leave their calls' arguments unknown)."""
    log = await read_log(conversations, session_id, user_id)
    messages = await _messages(conversations, session_id, user_id)
    args = {
        str(call["id"]): dict(call["args"])
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call.get("id")
    }
    return ConversationAudit(session_id, log.entries, args)


async def _messages(
    conversations: Conversations, session_id: str, user_id: str
) -> list[AnyMessage]:
    def page(offset: int) -> StateQuery:
        return StateQuery(
            user_id=user_id, transcript_offset=offset, transcript_limit=1_000, audit_limit=0
        )

    head = snapshot = await conversations.state(session_id, user_id, page(0))
    messages: dict[int, AnyMessage] = {}
    if head.transcript_offset > 0 and head.model_context is not None:
        try:
            stored = await stored_messages(
                conversations.temporal,
                session_id,
                head.model_context,
                head.transcript_offset,
                "their calls' arguments are unknown",
            )
            messages = dict(enumerate(stored[: head.transcript_offset]))
        except ConversationRefused:  # deleted by retention: those calls stay unknown
            pass
    while snapshot.transcript:
        for number, message in enumerate(snapshot.transcript, start=snapshot.transcript_offset):
            messages[number] = message
        after = snapshot.transcript_offset + len(snapshot.transcript)
        if after >= snapshot.transcript_total:
            break
        snapshot = await conversations.state(session_id, user_id, page(after))
    return [messages[number] for number in sorted(messages)]


def exported_audit(text: str, name: str) -> ConversationAudit:
    """An exported audit (``parley audit``'s JSON lines, or the gateway's ``format=json``
    object), verified (``parley.client.audit.verify``): an altered file is no evidence.
    ``ValueError`` in one line naming ``name`` and what is wrong."""
    lines = text.splitlines()
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("entries"), list):
        lines = [json.dumps(whole.get("header")), *map(json.dumps, whole["entries"])]
    try:
        verified = verify(lines)
    except BrokenExport as broken:
        raise ValueError(
            f"{name}: not a usable audit export ({broken}); export it again with "
            "`parley audit --session S --user U --output FILE`"
        ) from None
    entries = [
        AuditEntry.model_validate({k: record.get(k) for k in (*ENTRY_FIELDS, "prev_hash", "hash")})
        for record in map(json.loads, [line for line in lines if line.strip()][1:])
    ]
    return ConversationAudit(verified.session_id, entries)
