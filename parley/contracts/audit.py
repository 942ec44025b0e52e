"""The audit log's contracts: an entry (chained by hash, docs/design.md "The audit
chain") and the reference to the archive of entries older than the kept window
(``parley.storage.audit_archive``). Both sides of the Temporal boundary.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field
from pydantic_core import to_jsonable_python

from parley.contracts.payloads import Contract


class AuditEntry(Contract):
    at: datetime
    event: Literal[
        "message",
        "proposed",
        "refused",
        "decided",
        "ran",
        "failed",
        "expired",
        "turn_failed",
        "decision_refused",
        "notified",
        "policy",
        "remembered",
        "escalated",
        "upgraded",
        "delegated",
        "ended",
        "enqueued",
        "interrupted",
        "unqueued",
        "compacted",
        "spending",
        "forked",
        "rewound",
        "instructions",
        "instructions_added",
        "instructions_changed",
        "model_failover",
        "scheduled",
        "undone",
        "revert_proposed",
        "grant_revoked",
        "grant_lapsed",
        "judged",
    ]
    actor: str
    tool_call_id: str | None = None
    name: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    #: How a ``decided`` entry's decision reached the conversation: ``update`` (a
    #: client's ``decide`` update), ``signal`` (``decide_signal``), ``remembered``,
    #: ``link`` (a signed approval link) or ``judge`` (a rule's judge).
    channel: str | None = None
    #: The audit chain (docs/design.md, "The audit chain"): the hash of the entry before
    #: this one (entry 0: :meth:`genesis`), and :meth:`chained_hash` of this one. None
    #: on entries recorded before the chain, until the workflow next appends one.
    prev_hash: str | None = None
    hash: str | None = None

    @staticmethod
    def genesis(session_id: str) -> str:
        """The ``prev_hash`` of a conversation's first entry."""
        return hashlib.sha256(f"parley-audit\n{session_id}".encode()).hexdigest()

    def canonical(self) -> str:
        """The entry as the chain hashes it: compact JSON with sorted keys, the time in
        UTC to the microsecond, without the hash fields or any field left at None (so a
        field added later leaves the older entries' hashes as they were)."""
        at = self.at if self.at.tzinfo is not None else self.at.replace(tzinfo=UTC)
        fields = {
            "at": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "event": self.event,
            "actor": self.actor,
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "channel": self.channel,
            "detail": to_jsonable_python(self.detail),
        }
        kept = {k: v for k, v in fields.items() if v is not None}
        return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def chained_hash(self, prev_hash: str) -> str:
        """sha256 over the previous entry's hash and this entry's :meth:`canonical`."""
        text = f"{prev_hash}\n{self.canonical()}"
        return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


class AuditArchiveRef(Contract):
    """Audit entries older than the kept window, in the payload store: a chain of
    segments (``parley.storage.audit_archive``) holding entries ``first`` to
    ``first + length - 1``."""

    claim: dict[str, str]
    first: int = 0
    length: int

    @property
    def end(self) -> int:
        return self.first + self.length


def refusal_of(audit: list[AuditEntry], tool_call_ids: set[str]) -> str | None:
    """Why the latest decision on one of ``tool_call_ids`` was refused after it was
    accepted (a subagent refused it: ``decision_refused``), or None."""
    for entry in reversed(audit):
        if entry.event == "decision_refused" and entry.tool_call_id in tool_call_ids:
            message = entry.detail.get("message")
            if message:
                return str(message)
    return None


#: How a ``decided`` entry's action reads after "already decided by bob at …: ".
_DECIDED_AS = {"approve": "approved", "edit": "edited", "reject": "rejected"}


def decided_entry(audit: list[AuditEntry], tool_call_id: str) -> AuditEntry | None:
    """The latest ``decided`` entry of ``tool_call_id`` (a quorum's approvals each have
    one), or None."""
    for entry in reversed(audit):
        if entry.event == "decided" and entry.tool_call_id == tool_call_id:
            return entry
    return None


def already_decided(audit: list[AuditEntry], tool_call_id: str) -> str | None:
    """ "call-1 already decided by bob at 2026-12-07 10:02 UTC: approved" for a call the
    audit log says was decided, or None."""
    entry = decided_entry(audit, tool_call_id)
    if entry is None:
        return None
    action = str(entry.detail.get("action", "decided"))
    outcome = _DECIDED_AS.get(action, "answered" if action == "respond" else action)
    return (
        f"{tool_call_id} already decided by {entry.actor} at {entry.at:%Y-%m-%d %H:%M} UTC: "
        f"{outcome}"
    )
