"""The audit log loses nothing however long the conversation (``workflows/audit_archive``):
entries older than the kept window go to the audit archive in the payload store before
they leave the window, and ``parley audit`` (the real console script) exports every one
of them, chained from the session's genesis. Against a real dev server and worker.

The entries are made cheaply: a malformed ``decide_signal`` is refused and audited
(``decision_refused``) by its handler, with no turn, so 1,400 of them pass the window
(``KEPT_AUDIT_ENTRIES``) by more than a batch (``ARCHIVE_BATCH``) in seconds. A low
continue-as-new threshold makes the runs hand over meanwhile, so the window and the
archive are carried across continue-as-new.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from parley.client.audit import read_log, verify
from parley.contracts import (
    ARCHIVE_AUDIT,
    KEPT_AUDIT_ENTRIES,
    AuditArchiveRef,
    AuditEntry,
    AuditWindow,
    StateQuery,
    workflow_id_for,
)
from parley.storage import LocalFileStorageDriver, data_converter
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.record.audit_archive import ARCHIVE_BATCH
from tests.support import registry, script
from tests.support.cli import parley
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.processes import cli_env
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

REFUSED = 1_400


async def test_every_entry_is_exported_after_the_window_let_the_oldest_go(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    queue = f"parley-audit-archive-{uuid.uuid4().hex[:8]}"
    model = script({"content": "hello"})
    async with parley_worker(
        registry(), model, task_queue=queue, continue_as_new_after_events=400
    ) as conv:
        sid = new_session()
        await conv.send(sid, "alice", "hi")
        handle = conv.handle(sid)
        for start in range(0, REFUSED, 100):
            await asyncio.gather(
                *(
                    handle.signal("decide_signal", {"decided_by": "alice", "n": n})
                    for n in range(start, start + 100)
                )
            )

        async def archived() -> bool:
            page = await conv.state(
                sid, "alice", StateQuery(user_id="alice", transcript_limit=0, audit_limit=1)
            )
            return page.audit_archive is not None and page.audit_offset > 0

        await eventually(archived, 120, what="the audit archive")
        snapshot = await conv.state(
            sid, "alice", StateQuery(user_id="alice", transcript_limit=0, audit_offset=0)
        )
        log = await read_log(conv, sid, "alice")
        env = cli_env(client, payload_store, queue)
        exported = await asyncio.to_thread(parley, env, "audit", "-s", sid, "-u", "alice")
        async with serve_gateway(conv) as base, httpx.AsyncClient(base_url=base) as http:
            served = await http.get(f"/v1/conversations/{sid}/audit", headers=auth(ALICE_TOKEN))
        # Every run of it, each replayed by this build; together they hold the batches.
        wid = workflow_id_for(sid)
        archived_by, replayed = 0, 0
        replayer = Replayer(
            workflows=[ConversationWorkflow], data_converter=data_converter(driver=payload_store)
        )
        async for run in client.list_workflows(f'WorkflowId = "{wid}"'):
            history = await client.get_workflow_handle(wid, run_id=run.run_id).fetch_history()
            archived_by += sum(
                e.activity_task_scheduled_event_attributes.activity_type.name == ARCHIVE_AUDIT
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            )
            assert (await replayer.replay_workflow(history)).replay_failure is None
            replayed += 1

    # The window let the oldest go, and kept no more than a batch past its size ...
    assert snapshot.audit_offset > 0 and snapshot.audit_archive is not None
    assert snapshot.audit_total - snapshot.audit_offset < KEPT_AUDIT_ENTRIES + ARCHIVE_BATCH
    assert snapshot.audit_archive.first == 0
    assert snapshot.audit_archive.end >= snapshot.audit_offset  # the archive meets it
    assert snapshot.counters.continued_as_new >= 1  # and was carried to this run
    # ... and every entry is still read, from the first one on, chained from genesis.
    assert log.offset == 0 and len(log.entries) == snapshot.audit_total
    events = [entry.event for entry in log.entries]
    assert events[0] == "message"
    assert events.count("decision_refused") == REFUSED
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    header = json.loads(lines[0])
    assert header["offset"] == 0 and header["count"] == snapshot.audit_total
    verified = verify(lines)
    assert verified.offset == 0 and verified.count == snapshot.audit_total
    assert [json.loads(line)["offset"] for line in lines[1:]] == list(range(len(lines) - 1))
    assert served.status_code == 200 and served.text.splitlines()[1:] == lines[1:]
    # What it spends: one activity per batch of at least ARCHIVE_BATCH entries.
    assert replayed >= 2
    assert 1 <= archived_by <= snapshot.audit_archive.length // ARCHIVE_BATCH


def test_the_window_lets_an_entry_go_only_once_archived_but_never_grows_past_its_cap() -> None:
    at = datetime(2026, 12, 6, tzinfo=UTC)
    window = AuditWindow(entries=[AuditEntry(at=at, event="message", actor="a")] * 30)
    window.keep_latest_archived(10, 25)  # past the cap (a run with no archive): as before
    assert (window.offset, len(window.entries)) == (20, 10)
    window.entries *= 2  # 20 kept from entry 20 on, none archived
    window.keep_latest_archived(10, 25)
    assert (window.offset, len(window.entries)) == (20, 20)  # nothing archived: all stay
    assert len(window.to_archive(10)) == 10 and window.archived_until() == 20
    window.archive = AuditArchiveRef(claim={}, first=20, length=6)
    window.keep_latest_archived(10, 25)
    assert (window.offset, window.archived_until()) == (26, 26)  # the six archived went
    assert len(window.to_archive(10)) == 4
    # An archive that no longer meets the window (the cap let entries go unarchived)
    # is not continued: the next one starts where the window does.
    window.archive = AuditArchiveRef(claim={}, first=0, length=5)
    assert not window.archive_meets_window() and window.archived_until() == window.offset
