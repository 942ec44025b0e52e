"""Grants that expire: a remembered decision applies to later calls of its shape only
while what it was given for holds. A worker restarted with the tool's description
changed, with another policy file, or with its MCP server at another version, and a
grant whose lifetime is over, each make the next matching call wait for a decision,
saying why, audited ``grant_lapsed``; a restart with nothing changed leaves the grant
in force. ``parley grants`` lists a conversation's grants and revokes one (audited
``grant_revoked``). Real dev server, real workers, a real MCP server; the model is
scripted."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from langchain_core.tools import StructuredTool

from parley.activities.toolsets.mcp import toolset as mcp_toolset
from parley.client import ConversationRefused
from parley.client.grants import list_grants, revoke_grant
from parley.config.settings import Settings
from parley.contracts import Decision, ToolCall, call_shape
from parley.contracts.grants import (
    GrantLimits,
    RememberedDecision,
    lifetime,
    rules_version,
    spec_hash,
)
from parley.tools import ParleyTool, ToolRegistry, confirm, load_registry
from parley.tools.loading import McpConfig
from parley.workflows.rules.triage import Proposal, Run, Wait, triage
from tests.support import call, script
from tests.support.cli import assert_one_line_error, parley_against
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.ports import free_port
from tests.support.processes import ROOT, process
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually

STAMP = "Stamp a text."


def stamp_tool(description: str = STAMP) -> ParleyTool:
    def stamp(text: str) -> str:
        return f"stamped {text}"

    return confirm(StructuredTool.from_function(func=stamp, name="stamp", description=description))


def rounds(tool: str, n: int, **args: str) -> list[dict[str, object]]:
    """A script of ``n`` turns, each proposing one call of ``tool`` with ``args`` (ids
    c1..cn), then replying."""
    entries: list[dict[str, object]] = []
    for i in range(1, n + 1):
        entries += [{"content": "", "tool_calls": [call(tool, f"c{i}", **args)]}, {"content": "ok"}]
    return entries


def policy_file(home: Path, text: str) -> Settings:
    path = home / f"policies-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(text)
    return Settings(policies_file=str(path))


async def remember_first(conversations, sid: str) -> None:  # type: ignore[no-untyped-def]
    """Turn 1: the call waits; alice approves it and asks to remember."""
    first = await conversations.send(sid, "alice", "one")
    assert [p.tool_call_id for p in first.pending] == ["c1"]
    done = await conversations.decide(
        sid, "alice", [Decision(tool_call_id="c1", action="approve", remember=True)]
    )
    assert done.status == "completed", done


async def asked_again(conversations, sid: str, call_id: str, cause: str) -> str:  # type: ignore[no-untyped-def]
    """The next turn's call waits, saying why; the lapse is audited and the grant gone.
    Returns the reason the call shows."""
    turn = await conversations.send(sid, "alice", f"again {call_id}")
    assert [p.tool_call_id for p in turn.pending] == [call_id], turn
    reason = turn.pending[0].reason or ""
    assert reason.startswith("asked again: the remembered approval of "), reason
    state = await conversations.state(sid, "alice")
    lapsed = [e for e in state.audit if e.event == "grant_lapsed"]
    assert [(e.tool_call_id, e.detail["cause"], e.detail["grant"]) for e in lapsed] == [
        (call_id, cause, "c1")
    ]
    assert lapsed[0].detail["why"] == reason and lapsed[0].actor == "parley"
    assert state.remembered == []
    return reason


async def test_a_changed_tool_description_asks_again(parley_worker) -> None:
    queue, sid = f"grants-{uuid.uuid4().hex[:8]}", new_session()
    model = script(*rounds("stamp", 2, text="x"))
    async with parley_worker(ToolRegistry([stamp_tool()]), model, task_queue=queue) as conv:
        await remember_first(conv, sid)
        (grant,) = (await conv.state(sid, "alice")).remembered
        assert grant.spec_hash and grant.server is None and grant.expires_at is None
    changed = ToolRegistry([stamp_tool("Stamp a text, and file it for good.")])
    async with parley_worker(changed, model, task_queue=queue) as conv:
        reason = await asked_again(conv, sid, "c2", "tool")
        assert "was for another version of the tool's description" in reason
        # Approved again, the call runs: the lapse only asked.
        await conv.decide(sid, "alice", [Decision(tool_call_id="c2", action="approve")])
        answers = tool_messages((await conv.state(sid, "alice")).transcript)
        assert answers["c2"].content == "stamped x"


async def test_a_changed_policy_file_asks_again_and_an_unchanged_one_does_not(
    parley_worker, tmp_path: Path
) -> None:
    queue, sid = f"grants-{uuid.uuid4().hex[:8]}", new_session()
    model = script(*rounds("stamp", 3, text="x"))
    written = '[[rule]]\nname = "reads"\ntool = "stamp"\nargs = {text = "read*"}\ndecide = "auto"\n'

    def registry(text: str) -> ToolRegistry:
        return load_registry("", [stamp_tool()], settings=policy_file(tmp_path, text))

    async with parley_worker(registry(written), model, task_queue=queue) as conv:
        await remember_first(conv, sid)
    # Restarted with the same file: the grant still holds, the call runs at once.
    async with parley_worker(registry(written), model, task_queue=queue) as conv:
        turn = await conv.send(sid, "alice", "same file")
        assert turn.pending == [] and turn.status == "completed", turn
        state = await conv.state(sid, "alice")
        assert tool_messages(state.transcript)["c2"].content == "stamped x"
        decided = [e for e in state.audit if e.tool_call_id == "c2" and e.event == "decided"]
        assert [(e.channel, e.detail["remembered_from"]) for e in decided] == [("remembered", "c1")]
    changed = written.replace('"read*"', '"readme*"')
    async with parley_worker(registry(changed), model, task_queue=queue) as conv:
        reason = await asked_again(conv, sid, "c3", "policy")
        assert "was given under another version of the policy file" in reason


async def test_an_edit_into_a_lapsed_grants_shape_forgets_it_and_audits_the_lapse(
    parley_worker, tmp_path: Path
) -> None:
    """An edit meets a lapsed grant as a proposal does: the grant is forgotten and the
    lapse audited on the edited call, which runs as the editor's approval."""
    queue, sid = f"grants-{uuid.uuid4().hex[:8]}", new_session()
    other = {"content": "", "tool_calls": [call("stamp", "c2", text="y")]}
    model = script(*rounds("stamp", 1, text="x"), other, {"content": "ok"})
    reads = '[[rule]]\nname = "reads"\ntool = "stamp"\nargs = {text = "read*"}\ndecide = "auto"\n'

    def registry(text: str) -> ToolRegistry:
        return load_registry("", [stamp_tool()], settings=policy_file(tmp_path, text))

    async with parley_worker(registry(reads), model, task_queue=queue) as conv:
        await remember_first(conv, sid)
    changed = reads.replace('"read*"', '"readme*"')
    async with parley_worker(registry(changed), model, task_queue=queue) as conv:
        turn = await conv.send(sid, "alice", "another")
        assert [p.tool_call_id for p in turn.pending] == ["c2"], turn
        edit = Decision(tool_call_id="c2", action="edit", args={"text": "x"})
        done = await conv.decide(sid, "alice", [edit])
        assert done.status == "completed", done
        state = await conv.state(sid, "alice")
        assert tool_messages(state.transcript)["c2"].content.startswith("stamped x\n")
        lapsed = [e for e in state.audit if e.event == "grant_lapsed"]
        assert [(e.tool_call_id, e.detail["cause"], e.detail["grant"]) for e in lapsed] == [
            ("c2", "policy", "c1")
        ]
        assert "another version of the policy file" in lapsed[0].detail["why"]
        assert state.remembered == []


@contextmanager
def notes_server(home: Path, version: str) -> Iterator[str]:
    """The MCP notes server at ``version``: its servers file."""
    port = free_port()
    env = {
        **os.environ,
        "NOTES_FILE": str(home / "notes.txt"),
        "NOTES_VERSION": version,
        "PYTHONPATH": str(ROOT),
    }
    script_path = str(ROOT / "tests" / "support" / "mcp_notes_server.py")
    with process([sys.executable, script_path, str(port)], env, home / f"server-{version}.log"):
        url = f"http://127.0.0.1:{port}/mcp"
        httpx_ready(url, home / f"server-{version}.log")
        servers = home / f"servers-{version}.json"
        servers.write_text(json.dumps({"notes": {"transport": "streamable_http", "url": url}}))
        yield str(servers)


def httpx_ready(url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)


async def test_another_mcp_server_version_asks_again(parley_worker, tmp_path: Path) -> None:
    queue, sid = f"grants-{uuid.uuid4().hex[:8]}", new_session()
    model = script(*rounds("add_note", 2, text="milk"))
    with notes_server(tmp_path, "1.0.0") as servers:
        tools = ToolRegistry(mcp_toolset(McpConfig(servers)))
        assert tools.catalogue().get("add_note").server == "notes@1.0.0"  # type: ignore[union-attr]
        async with parley_worker(tools, model, task_queue=queue) as conv:
            await remember_first(conv, sid)
            (grant,) = (await conv.state(sid, "alice")).remembered
            assert grant.server == "notes@1.0.0"
    with notes_server(tmp_path, "1.1.0") as servers:
        tools = ToolRegistry(mcp_toolset(McpConfig(servers)))
        async with parley_worker(tools, model, task_queue=queue) as conv:
            reason = await asked_again(conv, sid, "c2", "server")
            assert reason.endswith("was for MCP server notes@1.0.0; it is now notes@1.1.0")
    assert (tmp_path / "notes.txt").read_text() == "milk\n"  # the second call never ran


async def test_a_grant_ends_with_its_lifetime_bounded_by_the_policy_file(
    parley_worker, tmp_path: Path
) -> None:
    sid = new_session()
    model = script(*rounds("stamp", 2, text="x"))
    settings = policy_file(tmp_path, "[grants]\nmax_remember_seconds = 2\n")
    tools = load_registry("", [stamp_tool()], settings=settings)
    async with parley_worker(tools, model) as conv:
        await conv.send(sid, "alice", "one")
        asked = Decision(tool_call_id="c1", action="approve", remember=True, remember_seconds=3600)
        await conv.decide(sid, "alice", [asked])
        (grant,) = await list_grants(conv, sid, "alice")
        assert grant.granted_at is not None and grant.expires_at is not None
        assert grant.expires_at - grant.granted_at == timedelta(seconds=2)  # the file's maximum
        await eventually(lambda: datetime.now(UTC) > grant.expires_at, what="the grant to end")
        reason = await asked_again(conv, sid, "c2", "expired")
        assert reason.endswith(f"ended at {grant.expires_at:%Y-%m-%d %H:%M:%S} UTC")


def test_a_lifetime_is_the_decisions_else_the_files_default_never_over_its_maximum() -> None:
    limits = GrantLimits(remember_seconds=60, max_remember_seconds=600)
    assert lifetime(None, None) is None
    assert lifetime(30, None) == 30
    assert lifetime(None, limits) == 60
    assert lifetime(900, limits) == 600
    assert lifetime(None, GrantLimits(max_remember_seconds=5)) == 5
    with pytest.raises(ValueError, match="goes with remember"):
        Decision(tool_call_id="c1", action="approve", remember_seconds=5)


def test_triage_applies_a_grant_only_while_what_it_was_given_for_holds() -> None:
    """Pure, without a server: a grant that matches runs the call; one whose tool,
    policy file, server or lifetime changed makes it wait, saying why; a grant carried
    from before grants recorded anything (only its four old fields) still holds."""
    now = datetime(2026, 12, 7, 12, tzinfo=UTC)
    catalogue = ToolRegistry([stamp_tool()]).catalogue()
    spec = catalogue.get("stamp")
    assert spec is not None
    stamp = ToolCall(tool_call_id="c2", name="stamp", args={"text": "x"})
    old = RememberedDecision.model_validate(
        {
            "shape": call_shape("stamp", {"text": "x"}),
            "policy": "auto",
            "decided_by": "alice",
            "tool_call_id": "c1",
        }
    )
    given = old.model_copy(
        update={
            "tool": "stamp",
            "spec_hash": spec_hash(spec),
            "policy_version": rules_version([]),
            "granted_at": now - timedelta(minutes=5),
            "expires_at": now + timedelta(minutes=5),
        }
    )

    def verdict(grant: RememberedDecision, at: datetime = now):  # type: ignore[no-untyped-def]
        context = Proposal(catalogue, [grant], at, 60, "alice", [])
        return triage(stamp, context)

    assert isinstance(verdict(old), Run) and isinstance(verdict(given), Run)
    changes = {
        "tool": given.model_copy(update={"spec_hash": "0" * 16}),
        "policy": given.model_copy(update={"policy_version": "0" * 16}),
        "server": given.model_copy(update={"server": "notes@1.0.0"}),
    }
    for cause, grant in changes.items():
        waits = verdict(grant)
        assert isinstance(waits, Wait) and waits.lapsed is not None, cause
        assert waits.lapsed[1].cause == cause and waits.call.reason == waits.lapsed[1].why
    late = verdict(given, now + timedelta(minutes=5))
    assert isinstance(late, Wait) and late.lapsed is not None
    assert late.call.reason == (
        "asked again: the remembered approval of 2026-12-07 11:55:00 UTC ended at "
        "2026-12-07 12:05:00 UTC"
    )


async def test_grants_are_listed_and_revoked_by_a_member_and_revoking_is_audited(
    parley_worker, client
) -> None:
    sid = new_session()
    model = script(*rounds("stamp", 2, text="x"))
    async with parley_worker(ToolRegistry([stamp_tool()]), model) as conv:
        await remember_first(conv, sid)
        listed = await parley_against(conv, client, "grants", "-s", sid, "-u", "alice", "--json")
        assert listed.returncode == 0, listed.stderr
        (shown,) = json.loads(listed.stdout)["grants"]
        assert shown["id"] == "c1" and shown["tool"] == "stamp" and shown["policy"] == "approve"
        assert shown["decided_by"] == "alice" and shown["expires_at"] is None
        assert shown["given_for"]["spec_hash"] and shown["given_for"]["server"] is None
        text = await parley_against(conv, client, "grants", "-s", sid, "-u", "alice")
        assert "c1: approve stamp" in text.stdout and "by alice" in text.stdout
        # Nobody else may revoke it, and an unknown id is refused, naming the grants.
        stranger = await parley_against(
            conv, client, "grants", "revoke", "-s", sid, "-u", "eve", "c1"
        )
        assert_one_line_error(stranger, "belongs to another user")
        with pytest.raises(ConversationRefused, match=r"no remembered decision 'c9'.*c1"):
            await revoke_grant(conv, sid, "alice", "c9")
        revoked = await parley_against(
            conv, client, "grants", "revoke", "-s", sid, "-u", "alice", "c1"
        )
        assert revoked.returncode == 0 and "revoked: c1" in revoked.stdout, revoked.stderr
        state = await conv.state(sid, "alice")
        (entry,) = [e for e in state.audit if e.event == "grant_revoked"]
        assert (entry.actor, entry.tool_call_id, entry.detail["grant"]) == ("alice", "c1", "c1")
        assert state.remembered == []
        # The next call of that shape waits, with nothing remembered to say.
        turn = await conv.send(sid, "alice", "two")
        assert [p.tool_call_id for p in turn.pending] == ["c2"]
        assert turn.pending[0].reason is None


async def test_the_gateway_lists_and_revokes_a_grant(parley_worker) -> None:
    sid = new_session()
    model = script(*rounds("stamp", 2, text="x"))
    async with (
        parley_worker(ToolRegistry([stamp_tool()]), model) as conv,
        serve_gateway(conv) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        await remember_first(conv, sid)
        grants = f"/v1/conversations/{sid}/grants"
        listed = await http.get(grants, headers=auth(ALICE_TOKEN))
        assert listed.status_code == 200, listed.text
        assert [(g["id"], g["policy"]) for g in listed.json()["grants"]] == [("c1", "approve")]
        assert (await http.get(grants, headers=auth(BOB_TOKEN))).status_code == 404  # not his
        unknown = await http.delete(f"{grants}/c9", headers=auth(ALICE_TOKEN))
        assert unknown.status_code == 422, unknown.text
        assert "no remembered decision 'c9'" in unknown.json()["error"]["message"]
        revoked = await http.delete(f"{grants}/c1", headers=auth(ALICE_TOKEN))
        assert revoked.status_code == 200 and revoked.json()["revoked"]["id"] == "c1"
        assert (await http.get(grants, headers=auth(ALICE_TOKEN))).json() == {"grants": []}
        audit = (await conv.state(sid, "alice")).audit
        assert [e.actor for e in audit if e.event == "grant_revoked"] == ["alice"]
