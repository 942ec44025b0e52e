"""Previews of MCP tools, named by the policy file's ``[[preview]]`` tables: a pending
call of an MCP tool shows the answer of a read-only tool of the same server (called with
the call's arguments it declares) in the state and in ``parley show --json``; approval
is of that answer and runs the call; a preview tool that fails gives a failed preview
and approval still runs; a server that is down gives a failed preview too. A table that
cannot be a preview stops the loading in one line naming the file, the table and the
fix. A real stdio MCP server (``tests/support/mcp_notes_server.py``), a real worker and
the real dev server; the model is the only fake (a script)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from temporalio.client import Client

from parley.activities.previews import PreviewActivities
from parley.client import ConversationRefused
from parley.config.settings import Settings
from parley.contracts import Decision, PreviewCallInput, args_hash
from parley.contracts.errors import ErrorType
from parley.tools import ToolRegistry, confirm, load_registry
from tests.support.cli import assert_one_line_error, parley_against, parley_all
from tests.support.processes import ROOT
from tests.support.scripts import call, script
from tests.support.transcripts import new_session

SERVER = ROOT / "tests" / "support" / "mcp_notes_server.py"
MCP = "parley.activities.toolsets.mcp:toolset"

#: The previews the conversation test names: one that answers, one that fails.
PREVIEWS = """
[[preview]]
tool = "erase_notes"
with = "find_notes"

[[preview]]
tool = "add_note"
with = "find_fails"
"""


def servers_file(home: Path, *names: str, script_path: Path = SERVER) -> Path:
    """A servers file of notes servers over stdio (several: each with prefixed names),
    all keeping ``home/notes.txt``."""
    connections = {
        name: {
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(script_path), "stdio"],
            "env": {"NOTES_FILE": str(home / "notes.txt"), "NOTES_READERS": "1"},
            **({"tool_name_prefix": True} if len(names) > 1 else {}),
        }
        for name in names or ("notes",)
    }
    servers = home / "servers.json"
    servers.write_text(json.dumps(connections))
    return servers


def registry(home: Path, policies: str, servers: Path | None = None, **more: Any) -> ToolRegistry:
    file = home / "policies.toml"
    file.write_text(policies)
    settings = Settings(
        tools=MCP, mcp_servers=str(servers or servers_file(home)), policies_file=str(file)
    )
    return load_registry(settings.tools, settings=settings, **more)


async def test_a_pending_mcp_call_shows_its_read_tools_answer_and_approval_runs_it(
    parley_worker, client: Client, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("buy milk\nsell eggs\n")
    tools = registry(tmp_path, PREVIEWS)
    flags = {spec.name: spec.has_preview for spec in tools.catalogue().tools}
    assert flags == {
        "add_note": True, "erase_notes": True, "list_notes": False, "fail": False,
        "find_notes": False, "find_fails": False,
    }  # fmt: skip
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("erase_notes", "e1", text="eggs", reason="sold"),
                call("add_note", "a1", text="buy bread"),
            ],
        },
        {"content": "Done."},
    )
    async with parley_worker(tools, model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "tidy my notes")
        erase, add = turn.pending
        # find_notes got the call's `text` and not its `reason`: the server refuses an
        # argument its tool does not declare, so this answer proves it was left out.
        assert erase.preview is not None and erase.preview.status == "ok"
        assert erase.preview.data == {"find_notes": "sell eggs"}
        assert add.preview is not None and add.preview.status == "failed"
        # What the server said, named by its read tool, never the adapter's class.
        assert add.preview.error == (
            "find_fails failed: the index of notes is unavailable (looking for 'buy bread')"
        )
        assert add.preview.error_type == ErrorType.TOOL_FAILED
        state = await conversations.state(sid, "alice")
        assert [p.preview for p in state.pending] == [erase.preview, add.preview]
        shown = await parley_against(
            conversations, client, "show", "--session", sid, "--user", "alice", "--json"
        )
        assert shown.returncode == 0, shown.stderr
        previews = {p["tool_call_id"]: p["preview"] for p in json.loads(shown.stdout)["pending"]}
        assert previews["e1"]["data"] == {"find_notes": "sell eggs"}
        assert previews["e1"]["hash"] == erase.preview.hash
        assert previews["a1"]["status"] == "failed"
        assert notes.read_text() == "buy milk\nsell eggs\n"  # nothing ran before a decision

        # The notes change: find_notes answers otherwise, so the approval is refused.
        notes.write_text("buy milk\nsell eggs\nboil eggs\n")
        both = [Decision(tool_call_id=i, action="approve") for i in ("e1", "a1")]
        with pytest.raises(ConversationRefused) as refused:
            await conversations.decide(sid, "alice", both)
        assert "no longer what was shown" in str(refused.value)
        assert notes.read_text() == "buy milk\nsell eggs\nboil eggs\n"
        [again, _] = (await conversations.state(sid, "alice")).pending
        assert again.preview is not None
        assert again.preview.data == {"find_notes": "sell eggs\nboil eggs"}

        # Approved as now shown (the failed preview of add_note blocks nothing): both run.
        pinned = Decision(tool_call_id="e1", action="approve", preview_hash=again.preview.hash)
        done = await conversations.decide(sid, "alice", [pinned, both[1]])
        assert done.status == "completed" and done.reply == "Done."
        assert [r.status for r in done.results] == ["success", "success"]
        assert notes.read_text() == "buy milk\nbuy bread\n"


async def test_a_server_that_is_down_gives_a_failed_preview(tmp_path: Path) -> None:
    copy = tmp_path / "notes_server.py"
    shutil.copy(SERVER, copy)
    tools = registry(tmp_path, PREVIEWS, servers_file(tmp_path, script_path=copy))
    copy.unlink()  # the server can no longer start
    args = {"text": "eggs", "reason": "sold"}
    request = PreviewCallInput(
        name="erase_notes", args=args, args_hash=args_hash(args),
        tool_call_id="e1", user_id="alice", session_id="s1",
    )  # fmt: skip
    preview = await PreviewActivities(tools).preview_call(request)
    assert preview.status == "failed" and preview.error_type == ErrorType.TOOL_TRANSIENT
    assert "MCP server 'notes' could not be reached" in str(preview.error)


@tool
def stamp(text: str) -> str:
    """Stamp a text (a built-in tool)."""
    return text


async def _stamp_preview(args: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"stamps": args["text"]}


#: Each table (the policy file's only one), and what its one line says.
REFUSED = {
    "unknown tool": (
        'tool = "erase_note"\nwith = "find_notes"',
        "preview 'erase_note': tool: 'erase_note' is no tool of this worker "
        "(did you mean 'erase_notes'?)",
    ),
    "unknown preview tool": (
        'tool = "erase_notes"\nwith = "find_note"',
        "with: 'find_note' is no tool of this worker (did you mean 'find_notes'?)",
    ),
    "no annotations": (
        'tool = "erase_notes"\nwith = "list_notes"',
        "with: server 'notes' gives no annotations for list_notes, so nothing says it "
        "only reads: name a tool it annotates readOnlyHint: true",
    ),
    "not read-only": (
        'tool = "add_note"\nwith = "erase_notes"',
        "with: erase_notes is not read-only (server 'notes' annotates readOnlyHint: false)",
    ),
    "an argument it lacks": (
        'tool = "list_notes"\nwith = "find_notes"',
        "with: find_notes requires 'text', which list_notes does not take",
    ),
    "a built-in tool": (
        'tool = "stamp"\nwith = "find_notes"',
        "tool: stamp is not a tool of an MCP server; a built-in tool declares its preview in code",
    ),
    "a built-in tool with a preview": (
        'tool = "stamped"\nwith = "find_notes"',
        "tool: stamped declares its own preview in code; a [[preview]] is for an MCP tool",
    ),
    "twice": (
        'tool = "erase_notes"\nwith = "find_notes"\n[[preview]]\ntool = "erase_notes"\n'
        'with = "find_notes"',
        "a [[preview]] before it already names erase_notes's preview",
    ),
    "a misspelt key": (
        'tool = "erase_notes"\nread = "find_notes"',
        "preview 'erase_notes': unknown key 'read' (it takes: tool, with)",
    ),
    "not text": (
        'tool = "erase_notes"\nwith = ["find_notes"]',
        "key 'with': Input should be a valid string",
    ),
}


@pytest.mark.parametrize(("table", "message"), REFUSED.values(), ids=REFUSED)
def test_a_table_that_cannot_be_a_preview_is_refused_in_one_line(
    tmp_path: Path, table: str, message: str
) -> None:
    built_in = [
        confirm(stamp),
        confirm(stamp.model_copy(update={"name": "stamped"}), preview=_stamp_preview),
    ]
    with pytest.raises(ValueError) as raised:
        registry(tmp_path, f"[[preview]]\n{table}\n", extra=built_in)
    text = str(raised.value)
    assert text.startswith(f"PARLEY_POLICIES: {tmp_path / 'policies.toml'}: preview "), text
    assert message in text and "\n" not in text, text


def test_a_preview_tool_of_another_server_is_refused(tmp_path: Path) -> None:
    servers = servers_file(tmp_path, "a", "b")
    with pytest.raises(ValueError) as raised:
        registry(tmp_path, '[[preview]]\ntool = "a_erase_notes"\nwith = "b_find_notes"\n', servers)
    assert str(raised.value).endswith(
        "preview 'a_erase_notes': with: b_find_notes is a tool of server 'b', not of 'a' like "
        "a_erase_notes: name a read-only tool of 'a'"
    )
    # Of its own server, the same table names a preview.
    ok = registry(tmp_path, '[[preview]]\ntool = "a_erase_notes"\nwith = "a_find_notes"\n', servers)
    assert [t.name for t in ok.tools() if t.spec().has_preview] == ["a_erase_notes"]


def test_parley_tools_names_each_preview_and_says_a_refusal_in_one_line(tmp_path: Path) -> None:
    refused = tmp_path / "refused.toml"
    refused.write_text('[[preview]]\ntool = "add_note"\nwith = "erase_notes"\n')
    accepted = tmp_path / "policies.toml"
    accepted.write_text(PREVIEWS)
    env = {**os.environ, "PARLEY_TOOLS": MCP, "PARLEY_MCP_SERVERS": str(servers_file(tmp_path))}
    bad, text, as_json = parley_all(
        ({**env, "PARLEY_POLICIES": str(refused)}, ["tools"]),
        ({**env, "PARLEY_POLICIES": str(accepted)}, ["tools"]),
        ({**env, "PARLEY_POLICIES": str(accepted)}, ["tools", "--json"]),
    )
    assert_one_line_error(bad, "erase_notes is not read-only")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "erase_notes  confirm  (preview by find_notes)" in lines
    assert "add_note  confirm  (preview by find_fails)" in lines
    assert any(line.startswith("find_notes  ") and "preview" not in line for line in lines)
    shown = {t["name"]: t for t in json.loads(as_json.stdout)["tools"]}
    assert shown["erase_notes"]["has_preview"] and not shown["erase_notes"]["has_inverse"]
    assert shown["erase_notes"]["preview_with"] == "find_notes"
    assert not shown["find_notes"]["has_preview"] and shown["find_notes"]["preview_with"] is None
