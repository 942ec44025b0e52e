"""Deleted by retention is an answer, not a 500. Three conversations end, a real
``parley store gc --retention 1`` collects what they stored, and every surface that
reads it says what went and when, in one line (the CLI) or as 410 Gone in the gateway's
one error shape:

- ``long``, longer than the window the workflow keeps: its older messages are only in
  the transcript chain, which went (fork, ``show --offset 0``); its latest messages are
  still read from Temporal (``show``, the page's JSON); a rewind of it is refused as
  ended before anything is read;
- ``big``, whose history refers to a claim-checked tool result that went: no replay
  reads its state any more (``show``, the page's JSON, fork, audit export, the whole
  result: ``parley result``, ``GET …/results/{call_id}``);
- ``audited``, with an audit archive (entries older than the window) that went.

A store and client of the module's own (on the shared dev server), so the collection
deletes no other test's content; a fresh worker after it, so nothing is read from a
worker's cache.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import StateQuery, workflow_id_for
from parley.contracts.errors import ErrorType
from parley.storage import data_converter, driver_of
from parley.storage.base import Referrer
from parley.worker.wiring import build_worker
from tests.support import registry
from tests.support.cli import assert_one_line_error, parley, parley_all
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.long_transcripts import Reads, longer_than_the_window
from tests.support.processes import worker_env
from tests.support.store_tools import toolset
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

USER = "alice"
#: Enough refused decisions (each one audit entry) for the audit archive to start.
REFUSED = 1_400


@dataclass
class Gone:
    conv: Conversations
    env: dict[str, str]
    long: str
    big: str
    audited: str
    #: "were deleted by retention on <when retention collected them>", as answered.
    deleted: str
    http: httpx.AsyncClient


async def refused_decisions(conv: Conversations, sid: str) -> None:
    """``REFUSED`` malformed ``decide_signal``s, each audited ``decision_refused``."""
    handle = conv.handle(sid)
    for start in range(0, REFUSED, 100):
        signals = (
            handle.signal("decide_signal", {"decided_by": USER, "n": n})
            for n in range(start, start + 100)
        )
        await asyncio.gather(*signals)

    async def archived() -> bool:
        query = StateQuery(user_id=USER, transcript_limit=0, audit_limit=1)
        page = await conv.state(sid, USER, query)
        return page.audit_archive is not None and page.audit_offset > 0

    await eventually(archived, 120, what="the audit archive")


@pytest.fixture(scope="module")
async def collected(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Gone]:
    root = tmp_path_factory.mktemp("retention-answers")
    target = temporal_env.client.service_client.config.target_host
    settings = Settings(
        temporal_address=target,
        namespace=temporal_env.client.namespace,
        task_queue=f"parley-gone-{uuid.uuid4().hex[:8]}",
        payload_store=str(root),
    )
    converter = data_converter(settings)  # the store of parts `parley store gc` opens
    client = await Client.connect(target, namespace=settings.namespace, data_converter=converter)
    store = driver_of(converter)
    await store.bind(client)  # as a worker's start does
    tools = registry(*toolset())
    long, big, audited = new_session(), new_session(), new_session()
    async with build_worker(client, settings, registry=tools, model=Reads()):
        conv = Conversations(client, settings)
        await longer_than_the_window(conv, long, USER)
        assert (await conv.send(big, USER, f"page {200 * 1024}")).reply == "done"
        await conv.send(audited, USER, "hello")
        await refused_decisions(conv, audited)
        for sid in (long, big, audited):
            await conv.end(sid, USER)
        closed = max(
            [(await conv.handle(sid).describe()).close_time for sid in (long, big, audited)]
        )
    env = worker_env(target, settings.task_queue, root, TEMPORAL_NAMESPACE=client.namespace)
    # Real time past their close, so a 1-second retention has run out for all three.
    await eventually(lambda: datetime.now(UTC) > closed + timedelta(seconds=1.2), 10)
    gc = await asyncio.to_thread(parley, env, "store", "gc", "--retention", "1", "--json")
    assert gc.returncode == 0, gc.stderr
    assert set(json.loads(gc.stdout)["conversations"]) == {
        workflow_id_for(sid) for sid in (long, big, audited)
    }
    record = await store.collected(Referrer(client.namespace, workflow_id_for(long)))
    assert record is not None and record.retention == timedelta(seconds=1)
    when = record.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    # A fresh worker: every read replays from history and the store.
    async with (
        build_worker(client, settings, registry=tools, model=Reads()),
        serve_gateway(Conversations(client, settings)) as base,
        httpx.AsyncClient(base_url=base, headers=auth(ALICE_TOKEN), timeout=60) as http,
    ):
        deleted = f"were deleted by retention on {when}"
        yield Gone(Conversations(client, settings), env, long, big, audited, deleted, http)


def gone_answer(answer: httpx.Response, expected: str) -> None:
    """410 in the one error shape, saying ``expected``."""
    assert answer.status_code == 410, answer.text
    error = answer.json()["error"]
    assert set(answer.json()) == {"error"} and set(error) == {"type", "message"}
    assert error["type"] == ErrorType.DELETED_BY_RETENTION
    assert expected in error["message"], error["message"]


async def test_older_messages_gone_refuse_a_fork_and_a_read_of_them_saying_when(
    collected: Gone,
) -> None:
    c, sid = collected, collected.long
    kept = (await c.conv.state(sid, USER)).transcript_offset
    gone = f"the messages of conversation {sid} before message {kept} {c.deleted}"
    fork, older, rewind, latest = await asyncio.to_thread(
        parley_all,
        (c.env, ["fork", "-s", sid, "--at", "5", "--as", new_session(), "-u", USER]),
        (c.env, ["show", "-s", sid, "-u", USER, "--offset", "0"]),
        (c.env, ["rewind", "-s", sid, "--to", "5", "-u", USER]),
        (c.env, ["show", "-s", sid, "-u", USER, "--json"]),
    )
    assert_one_line_error(fork, gone)
    assert "it can no longer be forked or rewound" in fork.stderr
    assert_one_line_error(older, gone)
    assert f"from message {kept} on, are still read" in older.stderr
    assert_one_line_error(rewind, "has ended")  # refused before anything is read
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout)["transcript_offset"] >= kept  # the latest 50

    url = f"/v1/conversations/{sid}"
    gone_answer(await c.http.post(f"{url}/fork", json={"at": 5, "as": new_session()}), gone)
    ended = await c.http.post(f"{url}/rewind", json={"to": 5})
    assert (
        ended.status_code == 409 and ended.json()["error"]["type"] == ErrorType.CONVERSATION_ENDED
    )
    page = await c.http.get(url)  # the page's JSON: the latest messages, from Temporal
    assert page.status_code == 200, page.text
    assert page.json()["transcript_offset"] == kept and page.json()["status"] == "ended"


async def test_a_history_whose_payloads_went_answers_gone_on_every_read(
    collected: Gone,
) -> None:
    c, sid = collected, collected.big
    gone = f"the messages and payloads conversation {sid} stored {c.deleted}"
    # One at a time: reads of one run at once, each failing its replay, can leave one
    # to Temporal's query timeout (the worker drops the others' tasks with the run),
    # which is answered the same, but only 30 s later.
    for command in (
        ["show", "-s", sid, "-u", USER],
        ["audit", "-s", sid, "-u", USER],
        ["fork", "-s", sid, "--at", "1", "--as", new_session(), "-u", USER],
        ["result", "-s", sid, "-u", USER, "--call", "p1"],  # its 200 KiB page, kept whole
    ):
        assert_one_line_error(await asyncio.to_thread(parley, c.env, *command), gone)
    url = f"/v1/conversations/{sid}"
    gone_answer(await c.http.get(url), gone)
    gone_answer(await c.http.get(f"{url}/audit"), gone)
    gone_answer(await c.http.get(f"{url}/results/p1"), gone)
    gone_answer(await c.http.post(f"{url}/fork", json={"at": 1, "as": new_session()}), gone)


async def test_an_audit_archive_gone_refuses_the_export_saying_when(
    collected: Gone,
) -> None:
    c, sid = collected, collected.audited
    query = StateQuery(user_id=USER, transcript_limit=0, audit_offset=0, audit_limit=1)
    first = (await c.conv.state(sid, USER, query)).audit_offset  # the window's first
    assert first > 0
    gone = f"the audit entries of conversation {sid} before entry {first} {c.deleted}"
    exported = await asyncio.to_thread(parley, c.env, "audit", "-s", sid, "-u", USER)
    assert_one_line_error(exported, gone)
    url = f"/v1/conversations/{sid}/audit"
    gone_answer(await c.http.get(url), gone)
    gone_answer(await c.http.get(url, params={"format": "json"}), gone)
    shown = await c.http.get(f"/v1/conversations/{sid}")  # the window is still read
    assert shown.status_code == 200 and shown.json()["audit_offset"] >= first
