"""Exportable audit: ``parley audit --session S --format jsonl`` (the real console
script) and ``GET /v1/conversations/{id}/audit`` export every entry, each decision with
its call, argument hash, decider, channel and time, chained by hash in the workflow;
``parley audit --verify`` finds an altered, a removed, an added line and a rewritten
chain, and names the line. Against a real dev server, worker and gateway."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx

from parley.client.audit import BrokenExport, verify
from parley.contracts import AuditEntry, Decision
from tests.support import RUNS, call, registry, script
from tests.support.cli import assert_one_line_error, parley
from tests.support.gateway import ALICE_TOKEN, auth, serve_gateway
from tests.support.transcripts import new_session


async def run_parley(env: dict[str, str], *args: str) -> object:
    return await asyncio.to_thread(parley, env, *args)


async def test_the_export_matches_the_audit_log_and_verify_names_what_changed(
    parley_worker, tmp_path: Path
) -> None:
    RUNS.clear()
    model = script(
        {"content": "", "tool_calls": [call("write_record", "a1", title="Q3")]},
        {"content": "Written."},
        {"content": "", "tool_calls": [call("write_record", "a2", title="Q4")]},
        {"content": "Not written."},
    )
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")
        await conversations.decide(sid, "alice", [Decision(tool_call_id="a1", action="approve")])
        await conversations.send(sid, "alice", "write Q4")
        reject = Decision(tool_call_id="a2", action="reject", message="not yet")
        await conversations.decide(sid, "alice", [reject])
        state = await conversations.state(sid, "alice")
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": conversations.temporal.service_client.config.target_host,
            "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        }
        exported = await run_parley(env, "audit", "--session", sid, "--user", "alice")
        from_gateway = await http.get(f"/v1/conversations/{sid}/audit", headers=auth(ALICE_TOKEN))
        path = tmp_path / "audit.jsonl"
        path.write_text(exported.stdout)
        checked_live = await run_parley(
            env, "audit", "--verify", "--file", str(path), "--session", sid, "--user", "alice"
        )
        # An export rewritten whole (an entry altered and every hash after it made
        # again) holds offline: the conversation tells it apart.
        lines = exported.stdout.splitlines()
        header, records = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
        rewritten = rechain(
            header, records, alter=lambda r: r["actor"] == "alice" and r["event"] == "decided"
        )
        (tmp_path / "rewritten.jsonl").write_text("\n".join(rewritten) + "\n")
        offline = await run_parley(
            env, "audit", "--verify", "--file", str(tmp_path / "rewritten.jsonl")
        )
        live = await run_parley(
            env, "audit", "--verify", "--file", str(tmp_path / "rewritten.jsonl"),
            "--session", sid, "--user", "alice",
        )  # fmt: skip

    assert exported.returncode == 0, exported.stderr
    assert from_gateway.status_code == 200 and from_gateway.text.splitlines()[1:] == lines[1:]
    assert from_gateway.headers["content-type"].startswith("application/x-ndjson")
    # The export is the audit log: entry for entry, with the chain the workflow made.
    assert header["kind"] == "parley.client.audit" and header["count"] == len(state.audit)
    assert [r["event"] for r in records] == [e.event for e in state.audit]
    assert [r["hash"] for r in records] == [e.hash for e in state.audit]
    assert records[0]["prev_hash"] == AuditEntry.genesis(sid)
    decided = [r for r in records if r["event"] == "decided" and "action" in r["detail"]]
    assert [(r["tool_call_id"], r["actor"], r["channel"]) for r in decided] == [
        ("a1", "alice", "update"),
        ("a2", "alice", "update"),
    ]
    proposed = {r["tool_call_id"]: r["args_hash"] for r in records if r["event"] == "proposed"}
    assert [r["args_hash"] for r in decided] == [proposed["a1"], proposed["a2"]]
    assert all(r["at"] for r in decided)
    assert checked_live.returncode == 0, checked_live.stderr
    assert checked_live.stdout.startswith(f"ok: conversation {sid}, {len(records)} entries")

    # Offline, each change is found and named, in one line.
    for change, expected in [
        (lambda rows: edit(rows, 3, actor="mallory"), "line 4 (entry 2, decided): altered"),
        (lambda rows: rows[:3] + rows[4:], "line 4 (entry 2"),
        (lambda rows: rows[:-1], "the header says"),
        (lambda rows: [rows[0], *rows[2:]], "line 2 (entry 0"),
        (lambda rows: [*rows, rows[-1]], "it says it is entry"),
    ]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join(change(lines)) + "\n")
        result = await asyncio.to_thread(
            parley, os.environ, "audit", "--verify", "--file", str(bad)
        )
        assert_one_line_error(result, expected)
        assert "does not verify" in result.stderr
    assert offline.returncode == 0, offline.stderr
    assert_one_line_error(live, "differs from the conversation's entry")


async def test_an_export_cut_short_with_its_header_rewritten_does_not_verify_live(
    parley_worker, tmp_path: Path
) -> None:
    """The last 2 entries (alice's approval among them) cut off and
    the header's count and head rewritten to match: offline it holds (and says what
    only the conversation can tell); against the conversation it is refused, naming
    where each ends and the entries the export lacks."""
    model = script(
        {"content": "", "tool_calls": [call("write_record", "a1", title="Q3")]},
        {"content": "Written."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        await conversations.send(sid, "alice", "write Q3")
        await conversations.decide(sid, "alice", [Decision(tool_call_id="a1", action="approve")])
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": conversations.temporal.service_client.config.target_host,
            "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
        }
        exported = await run_parley(env, "audit", "--session", sid, "--user", "alice")
        assert exported.returncode == 0, exported.stderr
        lines = exported.stdout.splitlines()
        header, records = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
        kept, cut = records[:-2], records[-2:]
        assert ("decided", "alice") in [(r["event"], r["actor"]) for r in cut], records
        shortened = {
            **header,
            "count": len(kept),
            "total": header["offset"] + len(kept),
            "head": kept[-1]["hash"],
        }
        path = tmp_path / "short.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in [shortened, *kept]) + "\n")
        offline = await run_parley(env, "audit", "--verify", "--file", str(path))
        live = await run_parley(
            env, "audit", "--verify", "--file", str(path), "--session", sid, "--user", "alice"
        )
        whole = tmp_path / "whole.jsonl"
        whole.write_text(exported.stdout)
        complete = await run_parley(
            env, "audit", "--verify", "--file", str(whole), "--session", sid, "--user", "alice"
        )

    total, last = len(records), len(kept) - 1
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.startswith(f"ok: conversation {sid}, {len(kept)} entries (0-{last})")
    assert "show only against the conversation" in offline.stdout
    decided = next(r for r in cut if r["event"] == "decided")
    assert_one_line_error(
        live,
        f"the export ends at entry {last} (head {kept[-1]['hash'][:16]}); the conversation "
        f"has {total} entries, up to entry {total - 1} (head {records[-1]['hash'][:16]}): "
        f"the export lacks entry {decided['offset']} (decided, by alice, call a1, approve)",
    )
    assert "removed from its end" in live.stderr and "entries match" not in live.stdout
    assert complete.returncode == 0, complete.stderr
    assert f"{total} entries match the conversation's, up to its head" in complete.stdout


def edit(lines: list[str], index: int, **fields: object) -> list[str]:
    """The export with line ``index`` (0: the header) changed, nothing else."""
    record = json.loads(lines[index])
    record.update(fields)
    return [*lines[:index], json.dumps(record), *lines[index + 1 :]]


def rechain(header: dict, records: list[dict], alter) -> list[str]:
    """The export with the first matching entry altered and every hash after it made
    again, as someone covering their tracks would."""
    changed = False
    prev = header["anchor"]
    out = []
    for record in records:
        if not changed and alter(record):
            record = {**record, "actor": "mallory"}
            changed = True
        entry = AuditEntry.model_validate(
            {
                k: record[k]
                for k in ("at", "event", "actor", "tool_call_id", "name", "channel", "detail")
            }
        )
        record = {**record, "prev_hash": prev, "hash": entry.chained_hash(prev)}
        prev = record["hash"]
        out.append(json.dumps(record))
    return [json.dumps({**header, "head": prev}), *out]


def test_verify_refuses_what_is_not_an_export() -> None:
    for lines, expected in [
        ([], "empty"),
        (["not json"], "line 1: not JSON"),
        (['{"kind": "other"}'], "not a Parley audit header"),
    ]:
        try:
            verify(lines)
        except BrokenExport as broken:
            assert expected in str(broken)
        else:
            raise AssertionError(f"{lines} verified")
