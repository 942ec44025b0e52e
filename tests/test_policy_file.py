"""A policy file never fails open. Every table of the file is read strictly: a key no
table takes, an argument its tool does not take, a tool the worker does not have, a
value of the wrong type, a pattern no value of the argument can match or a rule an
earlier one always matches first stops ``parley tools`` and ``parley worker`` (before
any Temporal server is contacted) with one line naming the file, the rule and the
mistake. The same file spelt right loads, and gates calls in a real worker on the dev
server."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parley.cli import app
from parley.config.settings import Settings
from parley.tools import ToolRegistry, load_registry
from parley.tools.policies import load_policies
from tests.support import call, script
from tests.support.cli import NOWHERE, assert_one_line_error, parley
from tests.support.policy_tools import toolset
from tests.support.processes import ROOT
from tests.support.transcripts import new_session, runs_in
from tests.support.typed_tools import toolset as typed_toolset

TOOLS = "tests.support.policy_tools:toolset,tests.support.typed_tools:toolset"

GOOD = """\
[[rule]]
name = "no-main-push"
tool = "push_branch"
args = { branch = "main" }
decide = "deny"

[[rule]]
name = "plans-need-review"
tool = "create_plan"
decide = "confirm"
requires_reviewer = true

[[rule]]
name = "no-forced-production"
tool = "deploy_service"
args = { environment = "production", force = "true" }
decide = "deny"

[[subagent]]
name = "planner"
description = "Works out and records plans."
tools = ["create_plan"]

[budget]
confirm_over_tokens = 200000
"""

#: One mistake each in GOOD (what it says, what it becomes) and the line it earns.
MISTAKES = [
    (
        "requires_reviewer = true",
        "requires_reviewr = true",
        "rule 'plans-need-review': unknown key 'requires_reviewr' "
        "(did you mean 'requires_reviewer'?)",
    ),
    (
        'args = { branch = "main" }',
        'args = { brnch = "main" }',
        "rule 'no-main-push': args: unknown argument 'brnch' of push_branch "
        "(did you mean 'branch'?)",
    ),
    (
        'tool = "push_branch"',
        'tool = "push_brnch"',
        "rule 'no-main-push': tool: 'push_brnch' matches no tool on this worker "
        "(did you mean 'push_branch'?)",
    ),
    (
        "requires_reviewer = true",
        'requires_reviewer = "true"',
        "rule 'plans-need-review': key 'requires_reviewer': Input should be a valid "
        "boolean, not 'true'",
    ),
    (
        'environment = "production"',
        'environment = "prod"',
        "rule 'no-forced-production': args: environment = 'prod' can never match: "
        "deploy_service takes one of 'staging', 'production' for 'environment'",
    ),
    (
        'force = "true"',
        'force = "yes"',
        "rule 'no-forced-production': args: force = 'yes' can never match: "
        "deploy_service takes true or false for 'force'",
    ),
    (
        '[[rule]]\nname = "plans-need-review"',
        '[[rule]]\nname = "main-reviewed"\ntool = "push_branch"\nargs = { branch = "MAIN" }\n'
        'decide = "confirm"\n\n[[rule]]\nname = "plans-need-review"',
        "rule 'main-reviewed': never matches: rule 'no-main-push' before it matches every "
        "call it would (put the narrower rule first, or remove one)",
    ),
    (
        'tools = ["create_plan"]',
        'tool = ["create_plan"]',
        "subagent 'planner': unknown key 'tool' (did you mean 'tools'?)",
    ),
    (
        "confirm_over_tokens = 200000",
        "confirm_over_token = 200000",
        "[budget]: unknown key 'confirm_over_token' (did you mean 'confirm_over_tokens'?)",
    ),
    (
        "confirm_over_tokens = 200000",
        'confirm_over_tokens = "200000"',
        "[budget]: key 'confirm_over_tokens': Input should be a valid integer, not '200000'",
    ),
    (
        "[[rule]]",
        "[[rules]]",
        "unknown table 'rules' (did you mean [[rule]]?); write each rule as a [[rule]] "
        "table, each subagent as a [[subagent]] table, the spending mark as one [budget] "
        "table, the grants' lifetimes as one [grants] table, the agent as one [agent] "
        "table and each MCP tool's preview as a [[preview]] table",
    ),
]


def misspelt(was: str, becomes: str) -> str:
    assert was in GOOD, was
    return GOOD.replace(was, becomes, 1)


def environment(policies: Path) -> dict[str, str]:
    return {
        **NOWHERE,
        "PYTHONPATH": str(ROOT),
        "PARLEY_TOOLS": TOOLS,
        "PARLEY_POLICIES": str(policies),
    }


def run_all(*commands: tuple[dict[str, str], list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands, a few at a time (each spends its first second importing)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda command: parley(command[0], *command[1]), commands))


async def test_the_file_spelt_right_loads_and_gates_calls(tmp_path: Path, parley_worker) -> None:
    policies = tmp_path / "policies.toml"
    policies.write_text(GOOD, encoding="utf-8")
    # loaded as the worker loads it: its toolsets, then the file checked against them
    registry = load_registry(TOOLS, settings=Settings(tools=TOOLS, policies_file=str(policies)))
    assert [r.name for r in registry.rules] == [
        "no-main-push",
        "plans-need-review",
        "no-forced-production",
    ]
    assert registry.rules[1].requires_reviewer
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("push_branch", "f1", branch="main"),
                call("push_branch", "f2", branch="feat/login"),
                call("create_plan", "f3", title="Q3"),
                call("deploy_service", "f4", service="api", environment="production", force=True),
            ],
        },
        {"content": "Done what I could."},
    )
    async with parley_worker(registry, model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "push, plan, deploy", reviewers=["bob"])
        results = {r.tool_call_id: r for r in turn.results}
        assert results["f1"].status == "error"
        assert "rule `no-main-push`" in (results["f1"].content or "")
        assert results["f4"].status == "error"
        assert "rule `no-forced-production`" in (results["f4"].content or "")
        pending = {p.tool_call_id: p for p in turn.pending}
        assert set(pending) == {"f2", "f3"}  # f2: the tool's own confirm
        assert pending["f2"].reviewer_rule is None
        assert pending["f3"].reviewer_rule == "plans-need-review"
        assert runs_in(sid, "push_branch") == [] and runs_in(sid, "deploy_service") == []


def test_parley_tools_and_the_worker_take_the_file_spelt_right(tmp_path: Path) -> None:
    policies = tmp_path / "policies.toml"
    policies.write_text(GOOD, encoding="utf-8")
    shown, worker = run_all((environment(policies), ["tools"]), (environment(policies), ["worker"]))
    assert shown.returncode == 0, shown.stderr
    assert "  no-main-push: push_branch when branch=main -> deny" in shown.stdout
    # the worker got past its tools and policies, to the (absent) Temporal server
    assert_one_line_error(worker, "cannot reach Temporal at 127.0.0.1:1")
    assert "PARLEY_POLICIES" not in worker.stderr


def test_each_mistake_stops_parley_tools_and_the_worker_with_one_line(tmp_path: Path) -> None:
    files = []
    for number, (was, becomes, _) in enumerate(MISTAKES):
        files.append(tmp_path / f"policies{number}.toml")
        files[-1].write_text(misspelt(was, becomes), encoding="utf-8")
    # `parley tools`, in this process (Typer's runner): one line for each
    for file, (_, _, line) in zip(files, MISTAKES, strict=True):
        shown = CliRunner().invoke(app, ["tools"], env=environment(file))
        assert shown.exit_code == 1 and shown.stdout == "", shown.output
        assert shown.stderr == f"error: PARLEY_POLICIES: {file}: {line}\n", shown.stderr
    # the worker, as processes, for the two mistakes first reported (each process costs
    # seconds; the worker and `parley tools` load the file through one function): each
    # stops with the same line before it looks for a Temporal server
    workers = run_all(*((environment(file), ["worker"]) for file in files[:2]))
    for file, (_, _, line), worker in zip(files[:2], MISTAKES[:2], workers, strict=True):
        assert_one_line_error(worker, line)
        assert worker.stderr == f"error: PARLEY_POLICIES: {file}: {line}\n", worker.stderr


def test_python_worker_py_stops_on_a_misspelt_key_as_parley_worker_does(tmp_path: Path) -> None:
    policies = tmp_path / "policies.toml"
    policies.write_text(misspelt(*MISTAKES[0][:2]), encoding="utf-8")
    script_run = subprocess.run(
        [sys.executable, str(ROOT / "worker.py")],
        capture_output=True,
        text=True,
        env=environment(policies),
    )
    assert_one_line_error(script_run, MISTAKES[0][2])


def specs() -> list:
    return [t.spec() for t in ToolRegistry([*toolset(), *typed_toolset()]).tools()]


@pytest.mark.parametrize(
    ("rules", "problem"),
    [
        # a type TOML has is never coerced into another
        ('name = "r"\ntool = "push_branch"\ndecide = "confirm"\napprovals = 2.0', "not 2.0"),
        ('name = "r"\ntool = "push_branch"\ndecide = "deny"\noutside = 1', "not 1"),
        ('name = "r"\ntool = "push_branch"\nargs = { branch = 3 }\ndecide = "deny"', 'write "3"'),
        ('name = "r"\ntool = "push_branch"\ndecision = "deny"', "did you mean 'decide'?"),
        ('name = "r"\ntool = "push_branch"\ndecide = "deny"\ncolour = "red"', "(it takes: name,"),
        ('name = "r"\ntool = "push_branch"\nhours = "09:00-09:00"\ndecide = "deny"', "empty"),
        # an escalation reaches one person: a group has no link
        (
            'name = "r"\ntool = "push_branch"\ndecide = "confirm"\ntimeout_seconds = 60\n'
            'on_timeout = "escalate"\nescalate_to = "group:ops"',
            "escalate_to names one person, not a group",
        ),
        # an argument no tool the pattern names takes
        ('name = "r"\ntool = "*"\nargs = { brnch = "x" }\ndecide = "deny"', "did you mean"),
        # a rule after one with the same tools, no window and wider patterns
        (
            'name = "a"\ntool = "push_*"\nargs = { branch = "feat/*" }\ndecide = "auto"\n'
            '[[rule]]\nname = "b"\ntool = "push_branch"\nargs = { branch = "feat/x" }\n'
            'days = "mon"\ndecide = "deny"',
            "rule 'b': never matches: rule 'a'",
        ),
    ],
)
def test_the_loader_refuses_what_could_never_mean_what_it_says(
    tmp_path: Path, rules: str, problem: str
) -> None:
    file = tmp_path / "policies.toml"
    file.write_text(f"[[rule]]\n{rules}\n", encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        load_policies(file, tools=specs())
    assert problem in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "rules",
    [
        # an argument some of the tools take: the others never match it
        'name = "r"\ntool = "*"\nargs = { branch = "main" }\ndecide = "deny"',
        # case folds, wildcards, "True" for a boolean
        'name = "r"\ntool = "deploy_service"\nargs = { environment = "PROD*", force = "True" }\n'
        'decide = "deny"',
        # narrower first, then wider: both decide
        'name = "a"\ntool = "push_branch"\nargs = { branch = "main" }\ndecide = "deny"\n'
        '[[rule]]\nname = "b"\ntool = "push_*"\ndecide = "confirm"',
        # a window of its own: the later rule decides at other times
        'name = "a"\ntool = "push_branch"\ndays = "sat,sun"\ndecide = "deny"\n'
        '[[rule]]\nname = "b"\ntool = "push_branch"\ndecide = "confirm"',
    ],
)
def test_the_loader_takes_rules_that_can_match(tmp_path: Path, rules: str) -> None:
    file = tmp_path / "policies.toml"
    file.write_text(f"[[rule]]\n{rules}\n", encoding="utf-8")
    assert load_policies(file, tools=specs()).rules
