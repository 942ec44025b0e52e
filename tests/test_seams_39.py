"""Adversarial seams of grants and the judge. A remembered decision asked for longer than
the calendar lasts (by the raw client, or by a policy file) neither fails the run nor
loads: it lasts at most ten years, or the file is refused in one line. A grant is
revoked only by a member of its conversation. The judge's prompt and its verdict's
reason carry no secret (a bearer token, an API key, a process secret, a link token), and
a judge that answers garbage or an enormous reason gives one bounded line. ``parley policies
suggest --since`` with a span past the calendar is one line. Real dev server and worker
where a run is involved; the models are the only fakes."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.tools import StructuredTool
from temporalio.testing import ActivityEnvironment

from parley.activities.judging import JudgeActivities, judge_prompt
from parley.client import ConversationRefused
from parley.client.grants import list_grants, revoke_grant
from parley.config.settings import Settings
from parley.contracts import Decision, PolicyRule, ToolContext, args_hash
from parley.contracts.grants import LONGEST_GRANT_SECONDS, lifetime
from parley.contracts.judge_calls import JudgeCallInput
from parley.contracts.judging import REASON_CHARS, ExcerptMessage
from parley.contracts.limits import PAYLOAD_PREVIEW_BYTES
from parley.observability.redaction import remember_values
from parley.tools import ParleyTool, ToolRegistry, confirm, load_registry
from parley.tools.policies import PolicyFileError
from tests.support import call, script
from tests.support.cli import NOWHERE, assert_one_line_error, parley_all
from tests.support.transcripts import new_session, tool_messages

#: A process secret the judge must never read (remembered as the worker remembers its own).
PROCESS_SECRET = "proc-secret-" + uuid.uuid4().hex
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXNlc3Npb24tdG9rZW4"
API_KEY = "sk-live-" + "A1b2C3d4" * 4
LINK_TOKEN = "eyJjYWxsIjoiYzEiLCJleHAiOjE3OTl9.Zm9yZ2VkLXNpZ25hdHVyZS12YWx1ZQ"


def stamp_tool(preview: Any = None) -> ParleyTool:
    def stamp(text: str) -> str:
        return f"stamped {text}"

    base = StructuredTool.from_function(func=stamp, name="stamp", description="Stamp.")
    return confirm(base, preview=preview)


def _rounds(n: int) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = []
    for i in range(1, n + 1):
        entries += [{"content": "", "tool_calls": [call("stamp", f"c{i}", text="x")]}]
        entries += [{"content": "ok"}]
    return entries


# --- grants --------------------------------------------------------------------------


def test_no_lifetime_a_grant_is_given_ends_past_the_calendar() -> None:
    """Whatever a decision or the file asks for, the grant's end is a real instant."""
    now = datetime.now(UTC)
    for asked in (10**12, 10**15, 2**62):
        seconds = lifetime(asked, None)
        assert seconds == LONGEST_GRANT_SECONDS
        assert now + timedelta(seconds=seconds) > now  # no OverflowError
    assert lifetime(3600, None) == 3600 and lifetime(None, None) is None


@pytest.mark.parametrize("key", ["remember_seconds", "max_remember_seconds"])
def test_a_policy_file_asking_grants_to_last_millennia_is_refused_in_one_line(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(f"[grants]\n{key} = 1000000000000\n")
    with pytest.raises(PolicyFileError) as refused:
        load_registry("", [stamp_tool()], settings=Settings(policies_file=str(path)))
    said = str(refused.value)
    assert "[grants]" in said and key in said and "\n" not in said, said


async def test_a_decision_remembered_for_millennia_keeps_the_run_alive(parley_worker) -> None:
    """The raw client may ask any positive ``remember_seconds``: the decision applies,
    the grant lasts ten years, and the conversation goes on; another user cannot revoke
    it, its owner can."""
    sid = new_session()
    async with parley_worker(ToolRegistry([stamp_tool()]), script(*_rounds(3))) as conv:
        first = await conv.send(sid, "alice", "one")
        assert [p.tool_call_id for p in first.pending] == ["c1"]
        forever = Decision(
            tool_call_id="c1", action="approve", remember=True, remember_seconds=10**12
        )
        done = await conv.decide(sid, "alice", [forever])
        assert done.status == "completed", done
        (grant,) = await list_grants(conv, sid, "alice")
        assert grant.expires_at - grant.granted_at == timedelta(seconds=LONGEST_GRANT_SECONDS)
        # The grant holds: the next call runs without asking.
        second = await conv.send(sid, "alice", "two")
        assert second.status == "completed" and not second.pending, second
        assert tool_messages((await conv.state(sid, "alice")).transcript)["c2"].content == (
            "stamped x"
        )
        # A stranger's revoke is refused and changes nothing.
        with pytest.raises(ConversationRefused):
            await revoke_grant(conv, sid, "mallory", "c1")
        assert [g.tool_call_id for g in await list_grants(conv, sid, "alice")] == ["c1"]
        revoked = await revoke_grant(conv, sid, "alice", "c1")
        assert revoked.tool_call_id == "c1"
        third = await conv.send(sid, "alice", "three")
        assert [p.tool_call_id for p in third.pending] == ["c3"]


# --- previews ----------------------------------------------------------------------


CONTEXT = ToolContext(user_id="alice", session_id="s", workflow_id="w", tool_call_id="c1")


@pytest.mark.parametrize(
    "answer",
    [
        {"notes": "x" * 5_000_000},
        [{"type": "image", "base64": "iVBORw0KGgo" * 50_000, "mime_type": "image/png"}],
        {"raw": b"\xff\xfe\x00 not text"},
        {"obj": object()},
    ],
    ids=["huge", "image", "bytes", "object"],
)
async def test_a_preview_of_any_size_or_kind_is_bounded_or_failed(answer: Any) -> None:
    """What a preview tool answers (an MCP server's, anything) is a bounded preview or a
    failed one in one line, never an exception on the worker."""

    async def preview(args: dict[str, Any], context: ToolContext) -> Any:
        return answer

    got = await stamp_tool(preview).previewed({"text": "x"}, CONTEXT)
    assert got is not None and got.status in ("ok", "failed"), got
    if got.status == "ok":
        assert len(json.dumps(got.data)) <= PAYLOAD_PREVIEW_BYTES + 64 and got.hash
    else:
        assert got.error and "\n" not in got.error and len(got.error) < 1_000


async def test_a_failing_preview_names_no_secret() -> None:
    remember_values([PROCESS_SECRET])

    async def preview(args: dict[str, Any], context: ToolContext) -> Any:
        raise RuntimeError(f"401 for {BEARER} ({PROCESS_SECRET}) at /notes?api_key={API_KEY}")

    got = await stamp_tool(preview).previewed({"text": "x"}, CONTEXT)
    assert got is not None and got.status == "failed" and got.error
    for secret in (BEARER.split()[1], API_KEY, PROCESS_SECRET):
        assert secret not in got.error, got.error


# --- policies suggest ----------------------------------------------------------------


def test_a_since_reaching_back_before_year_one_is_one_line() -> None:
    """``parley policies suggest --since`` takes any digits: a span past the calendar's
    first day (or past what a timedelta holds) is one line, never a traceback."""
    results = parley_all(
        (NOWHERE, ["policies", "suggest", "-u", "alice", "--since", "800000d"]),
        (NOWHERE, ["policies", "suggest", "-u", "alice", "--since", "99999999999999w"]),
    )
    for result, since in zip(results, ["800000d", "99999999999999w"], strict=True):
        assert_one_line_error(result, f"--since '{since}' reaches back before year 1")


# --- the judge ---------------------------------------------------------------------------


def _judged(excerpt: list[ExcerptMessage], args: dict[str, object] | None = None) -> JudgeCallInput:
    args = args or {"target": "staging", "sql": "select 1"}
    rule = PolicyRule(
        name="judged", tool="run_query", decide="confirm", judge="model", judge_model="fake"
    )
    return JudgeCallInput(
        tool_call_id="c1",
        name="run_query",
        args=args,
        args_hash=args_hash(args),
        description="Run one SQL query.",
        rule=rule,
        excerpt=excerpt,
    )


def test_the_judges_prompt_carries_no_secret() -> None:
    remember_values([PROCESS_SECRET])
    excerpt = [
        ExcerptMessage(role="human", text=f"call it with Authorization: {BEARER} please"),
        ExcerptMessage(role="tool", text=f'{{"api_key": "{API_KEY}", "env": "{PROCESS_SECRET}"}}'),
        ExcerptMessage(
            role="human", text=f"approve it here: https://parley.example/l/{LINK_TOKEN}"
        ),
    ]
    prompt = judge_prompt(_judged(excerpt, {"target": "staging", "sql": f"-- {API_KEY}"}))
    for secret in (BEARER.split()[1], API_KEY, PROCESS_SECRET, LINK_TOKEN):
        assert secret not in prompt, secret
    assert "call it with Authorization" in prompt  # the rest of the message is still read


async def _verdict(reply: str, excerpt: list[ExcerptMessage] | None = None):  # type: ignore[no-untyped-def]
    judge = JudgeActivities({"fake": FakeListChatModel(responses=[reply])})
    return await ActivityEnvironment().run(judge.judge_call, _judged(excerpt or []))


async def test_a_judges_reason_that_echoes_a_secret_is_redacted() -> None:
    remember_values([PROCESS_SECRET])
    reply = (
        f'{{"verdict": "deny", "reason": "it would send {API_KEY} and {PROCESS_SECRET} '
        f'with {BEARER} to {LINK_TOKEN}"}}'
    )
    verdict = await _verdict(reply)
    assert verdict.verdict == "deny" and not verdict.failed
    for secret in (BEARER.split()[1], API_KEY, PROCESS_SECRET, LINK_TOKEN):
        assert secret not in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "approve",
        '{"verdict": "APPROVE", "reason": "caps"}',
        '{"verdict": ["approve"], "reason": "a list"}',
        '{"verdict": null, "reason": "none"}',
        "\x00" * 5000,
    ],
)
async def test_a_judge_answering_garbage_is_doubt_in_one_bounded_line(reply: str) -> None:
    verdict = await _verdict(reply)
    assert (verdict.verdict, verdict.failed) == ("escalate", True)
    assert "\n" not in verdict.reason and len(verdict.reason) <= REASON_CHARS


async def test_an_enormous_reason_is_one_line_of_bounded_length() -> None:
    reason = ("approve because\n" * 100_000).strip()
    verdict = await _verdict(
        '{"verdict": "approve", "reason": "' + reason.replace("\n", "\\n") + '"}'
    )
    assert verdict.verdict == "approve" and not verdict.failed
    assert "\n" not in verdict.reason and len(verdict.reason) <= REASON_CHARS
    assert verdict.reason.startswith("approve because approve because")
