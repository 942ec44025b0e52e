"""Structured logs (``PARLEY_LOG_FORMAT=json``): one JSON object per line, naming the
session and the tool call, with no secret in them; text lines with no secret either."""

from __future__ import annotations

import io
import json
import logging

from parley.config.settings import Settings
from parley.contracts import Decision
from parley.contracts.links import ApprovalLink
from parley.observability.logs import (
    JsonLogFormatter,
    quiet_expected_tool_errors,
    redact_log_records,
)
from parley.observability.redaction import remember_values
from tests.support import ByConversation, call, registry, script
from tests.support.transcripts import new_session

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


class Lines(logging.Handler):
    """Each record as the text handler prints it (message, then any traceback)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.printed: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.printed.append(self.format(record))


async def test_an_expected_tool_error_logs_one_line_and_a_bug_keeps_its_traceback(
    parley_worker,
) -> None:
    """A refusal the model reads (guarded_write's PermissionError, as a protected
    branch) is one log line; a tool's programming error keeps its traceback. The SDK
    logs every failed activity with its traceback; the filter ``configure_logging`` and
    ``parley dev`` install keeps only the unexpected ones."""
    quiet_expected_tool_errors()
    buggy = {"content": "", "tool_calls": [call("buggy_tool", "b1")]}
    lines = Lines()
    root = logging.getLogger()
    root.addHandler(lines)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        model = ByConversation(
            scripts={
                "write to the guarded one": script(GUARDED, DONE),
                "run the buggy tool": script(buggy),
            }
        )
        async with parley_worker(registry(), model) as conversations:
            refused, broken = new_session(), new_session()
            answered = await conversations.send(refused, "alice", "write to the guarded one")
            failed = await conversations.send(broken, "alice", "run the buggy tool")
    finally:
        root.removeHandler(lines)
        root.setLevel(level)
    assert answered.status == "completed" and answered.results[0].status == "error"
    assert failed.status == "failed"

    about_refused = [text for text in lines.printed if f"conversation-{refused}" in text]
    failures = [text for text in about_refused if "failed" in text]
    assert len(failures) == 1, failures
    assert failures[0].count("\n") == 0, failures[0]
    assert "ToolPermissionError" in failures[0] and "read-only" in failures[0]
    assert not any("Traceback" in text for text in about_refused), about_refused

    about_broken = [text for text in lines.printed if f"conversation-{broken}" in text]
    (completing,) = [text for text in about_broken if "Completing activity as failed" in text]
    assert "Traceback" in completing and "ValueError: unexpected None in config" in completing


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


def test_text_lines_are_redacted_too_message_and_traceback() -> None:
    """A text handler Parley installs redacts as the JSON one does: a value it
    remembered (a gateway token), an approval link's token, a bearer header."""
    remember_values(["gw-token-text-redaction-0123"])
    token = ApprovalLink(
        session_id="s", tool_call_id="c", args_hash="h", user_id="u", action="approve",
        expires=2_000_000_000,
    ).sign("a-link-secret-of-at-least-32-characters")  # fmt: skip
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    redact_log_records(handler)
    logger = logging.getLogger("parley.test.text")
    logger.addHandler(handler)
    try:
        logger.warning("GET /links/%s with gw-token-text-redaction-0123", token)
        try:
            raise RuntimeError(f"refused Authorization: Bearer {token}")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = lines.getvalue()
    assert "GET /links/[redacted] with [redacted]" in text and "Traceback" in text
    assert token not in text and token.split(".")[1] not in text
    assert "gw-token-text-redaction-0123" not in text
