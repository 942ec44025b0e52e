"""``parley policies suggest``: the rules that would have decided, every time, what people
decided on calls that waited (N of N, at least ``--min``), an argument's values
generalised to a pattern (``feat/*``), as policy-file text that the real loader reads.
An ``auto`` never covers a call someone rejected; a rule the policy file already
decides so is left out. Read from the audit of real conversations on a dev server (and
from their exports); bad input is one line."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from parley.client.audit import AuditLog, export_lines
from parley.client.policy_evidence import exported_audit
from parley.contracts import AuditEntry, Decision, PolicyRule
from parley.contracts.names import args_hash
from parley.tools import ToolRegistry, confirm
from parley.tools.policies import load_policies
from parley.tools.suggestions import Decided, decided_calls, policy_text, rule_text, suggest
from tests.support.cli import NOWHERE, assert_one_line_error, parley, parley_all
from tests.support.policy_tools import create_plan, push_branch, toolset
from tests.support.scripts import ByConversation, call, script
from tests.support.waiting import eventually

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Audit:
    """A conversation's audit entries as the workflow writes them for calls that waited
    (``proposed`` with the arguments' hash, then each ``decided``), and the transcript's
    arguments of each call."""

    def __init__(self, session_id: str = "s-1") -> None:
        self.session_id, self.entries, self.args = session_id, [], {}

    def call(self, tool: str, decisions: list[tuple[str, str]], **args: Any) -> str:
        call_id = f"c{len(self.args) + 1}"
        self.args[call_id] = args
        self._add("proposed", "model", call_id, tool, {"args_hash": args_hash(args)})
        for action, who in decisions:
            detail = {"action": action, "args_hash": args_hash(args)}
            self._add("decided", who, call_id, tool, detail, channel="update")
        return call_id

    def _add(self, event: str, actor: str, call_id: str, tool: str, detail: dict, **kw) -> None:
        at = T0 + timedelta(minutes=len(self.entries))
        self.entries.append(AuditEntry(at=at, event=event, actor=actor, tool_call_id=call_id,
                                       name=tool, detail=detail, **kw))  # fmt: skip

    def decided(self, args: bool = True) -> list[Decided]:
        return decided_calls(self.session_id, self.entries, self.args if args else {})


def pushes(audit: Audit, branches: list[str], action: str = "approve", who: str = "alice") -> None:
    for branch in branches:
        audit.call("push_branch", [(action, who)], branch=branch)


FEATURES = ["feat/login", "feat/search", "feat/ui", "feat/api", "feat/docs"]


def specs() -> list:
    return [t.spec() for t in ToolRegistry(toolset()).tools()]


def test_a_rule_needs_every_decision_alike_n_of_n_at_least_the_minimum() -> None:
    audit = Audit()
    pushes(audit, FEATURES[:3], who="alice")
    pushes(audit, FEATURES[3:], who="bob")
    (only,) = suggest(audit.decided(), minimum=5).rules
    assert (only.rule.tool, only.rule.args, only.rule.decide) == (
        "push_branch",
        {"branch": "feat/*"},
        "auto",
    )
    assert (
        only.evidence() == "approved 5 of 5 times by alice, bob; last 2026-12-01, in 1 conversation"
    )
    assert suggest(audit.decided(), minimum=6).rules == []  # 5 of 5 is not 6

    pushes(audit, ["feat/legacy"], action="reject")  # 5 of 6 is no rule
    found = suggest(audit.decided(), minimum=5)
    assert found.rules == [] and found.decided == 6


def test_an_auto_never_covers_a_call_someone_rejected() -> None:
    """Six approvals of feat/* and one rejection of main: no rule for every push (it
    would make main auto), the feat/* one only; with main's arguments unknown (an
    export), no auto at all, since it might cover main."""
    audit = Audit()
    pushes(audit, [*FEATURES, "feat/cli"])
    rejected = audit.call("push_branch", [("reject", "bob")], branch="main")
    decided = audit.decided()
    (only,) = suggest(decided, minimum=5).rules
    assert only.rule.args == {"branch": "feat/*"} and only.count == 6
    assert not only.rule.matches("push_branch", audit.args[rejected], T0)

    unknown = [d if d.tool_call_id != rejected else Decided(**{**d.__dict__, "args": None})
               for d in decided]  # fmt: skip
    assert suggest(unknown, minimum=5).rules == []
    # Edited, answered, undone or reverted are no approvals either.
    for event in ("edit", "respond"):
        other = Audit()
        pushes(other, FEATURES)
        other.call("push_branch", [(event, "bob")], branch="feat/x")
        assert suggest(other.decided(), minimum=5).rules == []
    undone = Audit()  # four approvals would do, but the fifth was taken back
    pushes(undone, FEATURES)
    undone._add("undone", "alice", "c5", "push_branch", {"status": "undone"})
    assert suggest(undone.decided(), minimum=4).rules == []


def test_rejections_alike_suggest_a_deny_and_constant_arguments_are_pinned() -> None:
    audit = Audit()
    for _ in range(5):
        audit.call("push_branch", [("reject", "carol")], branch="main")
    (deny,) = suggest(audit.decided(), minimum=5).rules
    assert (deny.rule.args, deny.rule.decide) == ({"branch": "main"}, "deny")
    assert deny.evidence().startswith("rejected 5 of 5 times by carol")


def test_what_is_not_a_persons_decision_is_left_out() -> None:
    """A remembered decision repeats one (no new evidence), a quorum's first approval
    of two never ran the call, and arguments that do not hash to the proposed ones are
    not the call's: such a call counts, but for the whole tool only."""
    audit = Audit()
    pushes(audit, FEATURES[:4])
    audit._add("proposed", "model", "r1", "push_branch", {"args_hash": "x"})
    audit._add("decided", "alice", "r1", "push_branch", {"action": "approve"}, channel="remembered")
    audit.call("push_branch", [], branch="feat/q")
    audit._add("decided", "bob", "c5", "push_branch",
               {"action": "approve", "approvals": "1 of 2"}, channel="update")  # fmt: skip
    assert suggest(audit.decided(), minimum=5).rules == []

    audit.args["c1"] = {"branch": "main"}  # not what was proposed
    calls = {d.tool_call_id: d for d in audit.decided()}
    assert calls["c1"].args is None and calls["c5"].outcome == "short" and "r1" not in calls


def test_a_rule_the_policy_file_already_has_is_left_out(tmp_path: Path) -> None:
    audit = Audit()
    pushes(audit, FEATURES)
    same = PolicyRule(name="features", tool="push_branch", args={"branch": "feat/*"}, decide="auto")
    wider = PolicyRule(name="all-pushes", tool="push_*", decide="auto")
    for existing in ([same], [wider]):
        found = suggest(audit.decided(), existing, minimum=5)
        assert found.rules == [] and found.covered[0][1] == existing[0].name
        assert f"left out: auto-push_branch-feat (rule {existing[0].name!r}" in policy_text(
            found, "test"
        )
    # A rule deciding these calls otherwise: the suggestion goes before it, and loads so.
    guard = PolicyRule(name="push-protected", tool="push_branch", decide="confirm")
    (before,) = suggest(audit.decided(), [guard], minimum=5).rules
    assert before.before == "push-protected" and before.replaces == []
    assert "# put it before rule 'push-protected'" in rule_text(before)
    file = tmp_path / "policies.toml"
    file.write_text(rule_text(before) + '\n[[rule]]\nname = "push-protected"\n'
                    'tool = "push_branch"\ndecide = "confirm"\n')  # fmt: skip
    loaded = load_policies(file, tools=specs()).rules
    assert [r.name for r in loaded] == ["auto-push_branch-feat", "push-protected"]


def test_the_text_loads_with_the_real_loader_and_matches_only_its_evidence(
    tmp_path: Path,
) -> None:
    """Odd values are escaped (a ``*`` in a title matches itself alone), names stay
    unique and within the loader's limits, and the file the text makes is the rules."""
    audit = Audit()
    pushes(audit, FEATURES)
    for _ in range(5):
        audit.call("create_plan", [("approve", "alice")], title='Q3 * "big" [x]')
    for _ in range(5):
        audit.call("push_branch", [("reject", "alice")], branch="main")
    found = suggest(audit.decided(), [PolicyRule(name="deny-push_branch-main", tool="x*",
                                                 decide="confirm")], minimum=5)  # fmt: skip
    text = policy_text(found, "a test")
    file = tmp_path / "suggested.toml"
    file.write_text(text)
    loaded = load_policies(file, tools=specs()).rules
    assert loaded == [s.rule for s in found.rules]
    assert [r.decide for r in loaded] == ["deny", "auto", "auto"]  # denies first
    assert loaded[0].name == "deny-push_branch-main-2"  # the file's own name is taken
    plan = next(r for r in loaded if r.tool == "create_plan")
    assert plan.matches("create_plan", {"title": 'q3 * "BIG" [x]'}, T0)  # case-folded
    assert not plan.matches("create_plan", {"title": 'Q3 x "big" [x]'}, T0)
    assert text.count("# approved 5 of 5 times") == 2 and "Nothing was applied" in text


def test_an_export_is_read_as_either_form_and_only_when_it_verifies() -> None:
    """``parley audit``'s JSON lines and the gateway's ``format=json`` object give the
    same evidence (hashes, no arguments: a rule for the whole tool); an altered line is
    refused, naming it."""
    audit = Audit("s-exported")
    pushes(audit, FEATURES)
    prev = AuditEntry.genesis(audit.session_id)
    for entry in audit.entries:
        entry.prev_hash, entry.hash = prev, entry.chained_hash(prev)
        prev = entry.hash
    lines = export_lines(AuditLog(audit.session_id, None, 0, audit.entries))
    as_object = json.dumps(
        {"header": json.loads(lines[0]), "entries": list(map(json.loads, lines[1:]))}
    )
    for text in ("\n".join(lines), as_object):
        read = exported_audit(text, "export")
        assert (read.session_id, read.entries, read.args) == ("s-exported", audit.entries, {})
        (rule,) = suggest(decided_calls(read.session_id, read.entries, read.args)).rules
        assert (rule.rule.args, rule.args_unknown, rule.count) == ({}, True, 5)
    altered = [*lines[:4], lines[4].replace("alice", "mallory"), *lines[5:]]
    with pytest.raises(ValueError, match=r"^export: not a usable audit export \(line 5 .*altered"):
        exported_audit("\n".join(altered), "export")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    export = tmp_path / "audit.jsonl"
    export.write_text('{"kind": "parley.client.audit", "session_id": "s", "offset": 0}\n'
                      '{"kind": "entry"}\n')  # fmt: skip
    broken_policies = tmp_path / "policies.toml"
    broken_policies.write_text('[[rule]]\nname = "r"\ntool = "push_branch"\ndecision = "auto"\n')
    results = parley_all(
        (NOWHERE, ["policies", "suggest"]),
        (NOWHERE, ["policies", "suggest", "-u", "alice", "--since", "7x"]),
        (NOWHERE, ["policies", "suggest", "--audit", str(export)]),
        (NOWHERE, ["policies", "suggest", "--audit", str(tmp_path / "none.jsonl")]),
        (NOWHERE, ["policies", "suggest", "-u", "alice", "--policies", str(broken_policies)]),
        (NOWHERE, ["policies", "suggest", "-u", "default"]),
    )
    expected = [
        "give --user (your conversations and those you review are read), or --audit FILE",
        "--since '7x': write a duration as 30m, 12h, 7d or 2w",
        f"{export}: not a usable audit export (line 2 (entry 0, None): it says it is entry None",
        f"cannot read {tmp_path / 'none.jsonl'}: No such file or directory",
        "rule 'r': unknown key 'decision' (did you mean 'decide'?)",
        "'default' is not a user id",
    ]
    for result, line in zip(results, expected, strict=True):
        assert_one_line_error(result, line)


async def test_suggestions_from_the_audit_of_real_conversations(parley_worker, tmp_path) -> None:
    """Two conversations: five feature branches approved, main rejected, five plans
    approved. Over Temporal the transcript gives the arguments: feat/* and every plan;
    from the exports (hashes only), only the plans (main's rejection might be any push)."""
    user = f"pol-{uuid.uuid4().hex[:8]}"
    first, second = "push the features", "plan and push"
    model = ByConversation(scripts={
        first: script({"tool_calls": [call("push_branch", f"a{i}", branch=b)
                                      for i, b in enumerate([*FEATURES[:3], "main"])]},
                      {"content": "Pushed."}),
        second: script({"tool_calls": [call("push_branch", "b0", branch=FEATURES[3]),
                                       call("push_branch", "b1", branch=FEATURES[4]),
                                       *(call("create_plan", f"p{i}", title=f"Q{i}")
                                         for i in range(5))]},
                       {"content": "Done."}),
    })  # fmt: skip
    registry = ToolRegistry([confirm(push_branch), confirm(create_plan)])
    async with parley_worker(registry, model) as conversations:
        sessions = [f"s-{uuid.uuid4().hex[:10]}" for _ in range(2)]
        await conversations.send(sessions[0], user, first)
        await conversations.decide(sessions[0], user, [
            *approve("a0", "a1", "a2"), Decision(tool_call_id="a3", action="reject")])  # fmt: skip
        await conversations.send(sessions[1], user, second)
        await conversations.decide(
            sessions[1], user, approve("b0", "b1", *(f"p{i}" for i in range(5)))
        )
        await eventually(lambda: _listed(conversations, user, 2), what="both listed", seconds=60)
        env = {k: v for k, v in os.environ.items() if k != "PARLEY_POLICIES"}
        env |= {"TEMPORAL_ADDRESS": conversations.temporal.service_client.config.target_host,
                "PARLEY_TASK_QUEUE": conversations.settings.task_queue}  # fmt: skip
        had = tmp_path / "had.toml"
        had.write_text('[[rule]]\nname = "features"\ntool = "push_branch"\n'
                       'args = { branch = "feat/*" }\ndecide = "auto"\n')  # fmt: skip
        exports = [tmp_path / f"{s}.jsonl" for s in sessions]
        # In threads: the worker answering their queries runs on this event loop.
        text, as_json, known, *exported = await asyncio.to_thread(
            parley_all,
            (env, ["policies", "suggest", "-u", user]),
            (env, ["policies", "suggest", "-u", user, "--since", "1h", "--json"]),
            (env, ["policies", "suggest", "-u", user, "--policies", str(had)]),
            *(
                (env, ["audit", "-s", s, "-u", user, "-o", str(f)])
                for s, f in zip(sessions, exports, strict=True)
            ),
        )
    # The exports are read without Temporal.
    from_files = parley(
        NOWHERE, "policies", "suggest", *(a for f in exports for a in ("--audit", str(f)))
    )

    for result in (text, as_json, known, *exported, from_files):
        assert result.returncode == 0, result.stderr
    file = tmp_path / "suggested.toml"
    file.write_text(text.stdout)
    rules = load_policies(file, tools=specs()).rules
    assert [(r.tool, r.args, r.decide) for r in rules] == [
        ("create_plan", {}, "auto"),
        ("push_branch", {"branch": "feat/*"}, "auto"),
    ]
    assert f"# approved 5 of 5 times by {user}; last " in text.stdout
    assert (
        "in 2 conversations" in text.stdout and "11 decided calls in 2 conversations" in text.stdout
    )
    found = json.loads(as_json.stdout)
    assert found["decided"] == 11 and found["conversations"] == 2
    assert {s["name"]: s["count"] for s in found["suggestions"]} == {
        "auto-create_plan": 5, "auto-push_branch-feat": 5}  # fmt: skip
    assert "left out: auto-push_branch-feat (rule 'features'" in known.stdout
    assert "auto-create_plan" in known.stdout and 'branch = "feat/*"' not in known.stdout
    file.write_text(from_files.stdout)
    (plans,) = load_policies(file, tools=specs()).rules
    assert (plans.tool, plans.args, plans.decide) == ("create_plan", {}, "auto")
    assert "only their hashes" in from_files.stdout


def approve(*call_ids: str) -> list[Decision]:
    return [Decision(tool_call_id=i, action="approve") for i in call_ids]


async def _listed(conversations, user: str, count: int) -> bool:
    return len(await conversations.list(user)) >= count
