"""Structured logs (``PARLEY_LOG_FORMAT=json``): one JSON object per line, naming the
session and the tool call, with no secret in them."""

from __future__ import annotations

import io
import json
import logging

from parley.contracts import Decision
from parley.logs import JsonLogFormatter
from parley.settings import Settings
from tests.checks import new_session
from tests.support import call, registry, script

PROPOSE = {
    "content": "",
    "tool_calls": [
        call("write_record", "w1", title="Q3"),
    ],
}
GUARDED = {
    "content": "",
    "tool_calls": [call("guarded_write", "g1", target="Bearer sk-live-1234567890")],
}
DONE = {"content": "Done."}


async def test_tool_runs_log_json_lines_with_session_and_call_and_no_secrets(
    parley_worker, monkeypatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_API_KEY", "hunter2-very-secret")
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        async with parley_worker(registry(), script(PROPOSE, GUARDED, DONE)) as conversations:
            sid = new_session()
            await conversations.send(sid, "alice", "write Q3; my key is hunter2-very-secret")
            await conversations.decide(
                sid, "alice", [Decision(tool_call_id="w1", action="approve")]
            )
            logging.getLogger("parley.test").info("the key hunter2-very-secret must not show")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    entries = [json.loads(line) for line in lines.getvalue().splitlines()]
    ran = [e for e in entries if e.get("tool_call_id") == "w1" and "ran" in e["message"]]
    assert ran, entries
    assert ran[0]["session_id"] == sid
    assert ran[0]["tool"] == "write_record"
    assert ran[0]["workflow_id"] == f"conversation-{sid}"
    assert ran[0]["attempt"] == 1
    failed = [e for e in entries if e.get("tool_call_id") == "g1"]
    assert failed and failed[-1]["level"] == "WARNING"
    text = lines.getvalue()
    assert "sk-live-1234567890" not in text
    assert "hunter2-very-secret" not in text
    assert "[redacted]" in text


def test_the_log_format_setting_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("PARLEY_LOG_FORMAT", "JSON")
    assert Settings.from_env().log_format == "json"
    monkeypatch.setenv("PARLEY_LOG_FORMAT", "xml")
    try:
        Settings.from_env()
    except ValueError as err:
        assert "PARLEY_LOG_FORMAT" in str(err) and "text, json" in str(err)
    else:
        raise AssertionError("xml was accepted")
