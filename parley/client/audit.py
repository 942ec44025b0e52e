"""The audit log as a file: export a conversation's chained entries as JSON lines, and
verify such a file, offline or against the live conversation. Client side (reads the
conversation through ``parley.client.Conversations``; the chain itself is computed in
the workflow, ``AuditEntry.chained_hash`` in ``parley.contracts``).

An export is one header line, then one line per entry, oldest first::

    {"kind": "parley.client.audit", "version": 1, "session_id", "run_id", "offset", "count",
     "total", "anchor", "head", "exported_at"}
    {"kind": "entry", "offset", "at", "event", "actor", "tool_call_id", "name",
     "args_hash", "channel", "detail", "prev_hash", "hash"}

Each entry's ``hash`` is sha256 over the entry before it's hash and its own canonical
JSON, so an altered entry no longer matches its hash, and a removed one breaks the next
one's ``prev_hash``. The header says where the export starts (``offset``, ``anchor``:
the first entry's ``prev_hash``, the session's genesis at offset 0) and ends (``count``,
``head``: the last entry's hash), so a removed first or last line is found too. A file
rewritten whole (every hash recomputed) is consistent; only the conversation itself
(``verify_live``) or a head kept elsewhere tells it apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio.service import RPCError

from parley.client import ConversationRefused, Conversations
from parley.client.stored import unreadable_stored
from parley.contracts import AuditEntry, StateQuery, workflow_id_for
from parley.contracts.errors import ErrorType
from parley.storage import driver_of
from parley.storage.audit_archive import AuditArchive

KIND = "parley.client.audit"
VERSION = 1
#: An entry's own fields, as the line carries them (the rest is derived or the chain).
ENTRY_FIELDS = ("at", "event", "actor", "tool_call_id", "name", "channel", "detail")


@dataclass
class AuditLog:
    """The entries a conversation keeps (``entries[0]`` is entry number ``offset``)."""

    session_id: str
    run_id: str | None
    offset: int
    entries: list[AuditEntry]


class BrokenExport(Exception):
    """An export that does not verify; the message names the first broken line."""


async def read_log(
    conversations: Conversations, session_id: str, user_id: str, groups: Sequence[str] = ()
) -> AuditLog:
    """Every entry of the conversation: the audit archive's (from the payload store),
    then the window's, a page at a time, read as ``user_id`` with their verified
    ``groups`` (refusals as the ``state`` query's: ``ConversationRefused``). The archive
    is checked against the window: its last hash must be the first kept entry's
    ``prev_hash``, so an archive changed in the store is found even when its own chain
    was rewritten."""
    reader = StateQuery(user_id=user_id, transcript_limit=0, audit_limit=1000, groups=[*groups])
    query = reader.model_copy(update={"audit_offset": 0})
    page = await conversations.state(session_id, user_id, query)
    first, total = page.audit_offset, page.audit_total
    archive = page.audit_archive
    entries: list[AuditEntry] = []
    if archive is not None and archive.end >= first:
        store = AuditArchive(driver_of(conversations.temporal.data_converter))
        try:
            entries = await store.load(archive)
        except ValueError as err:  # gone (retention says when), or not the one chained
            raise await unreadable_stored(
                conversations.temporal,
                session_id,
                err,
                f"the audit entries of conversation {session_id} before entry {first}",
                f"the later ones, from entry {first} on, are still read (parley show), but "
                "an export holds every entry",
                ErrorType.AUDIT_UNREADABLE,
            ) from None
        first = archive.first
    else:
        entries = list(page.audit)
    while first + len(entries) < total:
        at = first + len(entries)
        query = reader.model_copy(update={"audit_offset": at})
        page = await conversations.state(session_id, user_id, query)
        if page.audit_offset != at:
            raise ConversationRefused(
                "the audit log moved on while it was read; export again",
                ErrorType.TURN_IN_PROGRESS,
            )
        if not page.audit:
            break
        if archive is not None and at == archive.end and entries:
            if page.audit[0].prev_hash != entries[-1].hash:
                raise ConversationRefused(
                    f"entry {at - 1} of the audit archive is not the one the conversation "
                    "chained its next entry to: the archive in the payload store was altered",
                    ErrorType.AUDIT_UNREADABLE,
                )
        entries.extend(page.audit)
    run_id: str | None = None
    try:
        run_id = (await conversations.handle(session_id).describe()).run_id
    except RPCError:
        pass
    return AuditLog(session_id, run_id, first, entries)


def export_lines(log: AuditLog, now: datetime | None = None) -> list[str]:
    """The export: its header, then one line per entry."""
    return [_json(header_record(log, now))] + [
        _json(entry_record(entry, number))
        for number, entry in enumerate(log.entries, start=log.offset)
    ]


def header_record(log: AuditLog, now: datetime | None = None) -> dict[str, Any]:
    """The export's first line: where it starts and ends (see the module docstring)."""
    entries = log.entries
    return {
        "kind": KIND,
        "version": VERSION,
        "session_id": log.session_id,
        "workflow_id": workflow_id_for(log.session_id),
        "run_id": log.run_id,
        "offset": log.offset,
        "count": len(entries),
        "total": log.offset + len(entries),
        "anchor": entries[0].prev_hash if entries else None,
        "head": entries[-1].hash if entries else None,
        "exported_at": (now or datetime.now(UTC)).isoformat(),
    }


def entry_record(entry: AuditEntry, offset: int) -> dict[str, Any]:
    """One entry's line: its fields, its number, the call's argument hash, the chain."""
    data = entry.model_dump(mode="json")
    return {
        "kind": "entry",
        "offset": offset,
        "at": data["at"],
        "event": entry.event,
        "actor": entry.actor,
        "tool_call_id": entry.tool_call_id,
        "name": entry.name,
        "args_hash": entry.detail.get("args_hash"),
        "channel": entry.channel,
        "detail": data["detail"],
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
    }


@dataclass
class Verified:
    """A valid export: whose it is and which entries it holds."""

    session_id: str
    offset: int
    count: int
    head: str | None
    hashes: dict[int, str]
    line_of: dict[int, int]
    #: When the header says the export was made (not chained: a hint, never proof).
    exported_at: datetime | None = None

    @property
    def end(self) -> int:
        """The number of the entry after the export's last."""
        return self.offset + self.count

    def summary(self) -> str:
        if not self.count:
            return f"ok: conversation {self.session_id}, no entries"
        last = self.offset + self.count - 1
        return (
            f"ok: conversation {self.session_id}, {self.count} entries ({self.offset}-{last}), "
            f"the chain is whole up to {str(self.head)[:16]}"
        )


def verify(lines: Iterable[str]) -> Verified:
    """Check an export offline; raise ``BrokenExport`` naming the first broken line."""
    rows = [line for line in lines if line.strip()]
    if not rows:
        raise BrokenExport("the export is empty (no header line)")
    header = _object(rows[0], 1)
    if header.get("kind") != KIND:
        raise BrokenExport(f"line 1: not a Parley audit header (kind {header.get('kind')!r})")
    session_id, offset = header.get("session_id"), header.get("offset")
    if not isinstance(session_id, str) or not isinstance(offset, int) or offset < 0:
        raise BrokenExport("line 1: the header has no session_id or offset")
    expected = header.get("anchor")
    if offset == 0:
        expected = AuditEntry.genesis(session_id)
        if header.get("count") and header.get("anchor") != expected:
            raise BrokenExport("line 1: the header's anchor is not this session's genesis")
    hashes: dict[int, str] = {}
    line_of: dict[int, int] = {}
    for index, row in enumerate(rows[1:]):
        number, at = offset + index, index + 2
        record = _object(row, at)
        name = f"line {at} (entry {number}, {record.get('event')})"
        if record.get("offset") != number:
            raise BrokenExport(
                f"{name}: it says it is entry {record.get('offset')}: an entry before it "
                "was removed or moved"
            )
        try:
            entry = AuditEntry.model_validate({k: record.get(k) for k in ENTRY_FIELDS})
        except ValidationError as err:
            raise BrokenExport(f"{name}: not an audit entry ({_first_error(err)})") from None
        if record.get("hash") is None:
            raise BrokenExport(f"{name}: not chained (recorded before the audit chain)")
        if record.get("hash") != entry.chained_hash(str(record.get("prev_hash"))):
            raise BrokenExport(f"{name}: altered: its content does not match its hash")
        if record.get("prev_hash") != expected:
            why = "the header's anchor" if index == 0 else f"entry {number - 1}'s hash"
            raise BrokenExport(
                f"{name}: its prev_hash is not {why}: an entry before it was removed or altered"
            )
        if record.get("args_hash") != entry.detail.get("args_hash"):
            raise BrokenExport(f"{name}: altered: args_hash is not its detail's")
        expected = hashes[number] = record["hash"]
        line_of[number] = at
    count = len(rows) - 1
    if header.get("count") != count or header.get("total") != offset + count:
        raise BrokenExport(
            f"line {count + 1}: the header says {header.get('count')} entries, the file has "
            f"{count}: entries after it were removed (or the header was altered)"
        )
    if count and header.get("head") != expected:
        raise BrokenExport(
            f"line {count + 1} (entry {offset + count - 1}): its hash is not the header's "
            "head: the last entries were removed or altered"
        )
    return Verified(session_id, offset, count, header.get("head"), hashes, line_of, _time(header))


def verify_live(verified: Verified, live: AuditLog) -> tuple[str | None, int]:
    """Compare a verified export with the conversation's entries: the first difference
    (naming its line) or None, and how many entries both hold. The export must end where
    the conversation's chain does, on its head: entries cut off its end, with the
    header's count and head rewritten to match, hold offline but not here."""
    if live.session_id != verified.session_id:
        return f"the export is of conversation {verified.session_id}, not {live.session_id}", 0
    if verified.count and live.offset < verified.offset:
        return (
            f"line 2: the export starts at entry {verified.offset}, but the conversation "
            f"still keeps entries from {live.offset}: entries at its start were removed"
        ), 0
    live_hashes = {live.offset + i: e.hash for i, e in enumerate(live.entries)}
    shared = [n for n in verified.hashes if n in live_hashes]
    for number in shared:
        if live_hashes[number] != verified.hashes[number]:
            return (
                f"line {verified.line_of[number]} (entry {number}): it differs from the "
                "conversation's entry: altered, and the hashes after it recomputed"
            ), len(shared)
    live_end = live.offset + len(live.entries)
    if verified.count and verified.end > live_end:
        return "the export has entries the conversation never had", len(shared)
    if verified.end < live_end:
        return _missing(verified, live, live_end), len(shared)
    return None, len(shared)


#: How many of the entries an export lacks its refusal names one by one.
NAMED_MISSING = 5


def _missing(verified: Verified, live: AuditLog, live_end: int) -> str:
    """The refusal of an export that ends before the conversation's chain does: where
    each ends, and the entries it lacks (by number, event, actor and call)."""
    lacking = live.entries[max(verified.end - live.offset, 0) :]
    first = live_end - len(lacking)
    named = [
        f"entry {number} ({_described_entry(entry)})"
        for number, entry in enumerate(lacking[:NAMED_MISSING], start=first)
    ]
    if len(lacking) > NAMED_MISSING:
        named.append(f"{len(lacking) - NAMED_MISSING} more")
    ends = (
        f"the export ends at entry {verified.end - 1} (head {str(verified.head)[:16]})"
        if verified.count
        else "the export holds no entry"
    )
    head = str(live.entries[-1].hash)[:16]
    made = verified.exported_at
    if made is not None and all(entry.at > made for entry in lacking):
        why = f"recorded after the export was made ({made.isoformat()}): export again"
    else:
        why = "removed from its end, and its header's count and head rewritten to match"
    return (
        f"{ends}; the conversation has {live_end} entries, up to entry {live_end - 1} "
        f"(head {head}): the export lacks {', '.join(named)}: {why}"
    )


def _described_entry(entry: AuditEntry) -> str:
    parts = [entry.event, f"by {entry.actor}"]
    if entry.tool_call_id:
        parts.append(f"call {entry.tool_call_id}")
    if action := entry.detail.get("action"):
        parts.append(str(action))
    return ", ".join(parts)


def _time(header: dict[str, Any]) -> datetime | None:
    try:
        made = datetime.fromisoformat(str(header.get("exported_at")))
    except ValueError:
        return None
    return made if made.tzinfo is not None else None


def _object(row: str, line: int) -> dict[str, Any]:
    try:
        value = json.loads(row)
    except json.JSONDecodeError as err:
        raise BrokenExport(f"line {line}: not JSON ({err.msg})") from None
    if not isinstance(value, dict):
        raise BrokenExport(f"line {line}: not a JSON object")
    return value


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}"


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
