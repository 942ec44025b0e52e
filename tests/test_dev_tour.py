"""The README's tour of the policy file and a subagent, as written there: `parley dev`
with the example policy file (docs/examples/policies.toml), then the README's commands
in another shell, each checked for what it should show (issue 19, point 9)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

import pytest

from tests.support.dev import parley, running_dev_server, without_paths
from tests.support.processes import ROOT

EXAMPLE = "docs/examples/policies.toml"


def readme_tour() -> list[list[str]]:
    """The commands of the README's code block that starts `parley dev` with the
    example policy file, each as its arguments after `parley` (comments left out)."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    (block,) = [b for b in blocks if f"PARLEY_POLICIES={EXAMPLE} parley dev" in b]
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "parley":
            commands.append(words[1:])
    return commands


@pytest.fixture(scope="module")
def dev_with_policies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    # Started from the checkout, as the README's relative path expects.
    extra = {"PARLEY_POLICIES": EXAMPLE}
    with running_dev_server(tmp_path_factory.mktemp("parley-tour"), extra, cwd=ROOT) as server:
        yield server


def test_the_readme_tour_of_the_policy_file_and_a_subagent(dev_with_policies) -> None:
    env = without_paths(dev_with_policies)  # the other shell: no PARLEY_POLICIES set
    assert "PARLEY_POLICIES" not in env
    tour = readme_tour()
    assert [command[0] for command in tour] == ["tools", "send", "approve", "approve", "send"]
    tools, ask, hand_over, approve_plan, push_main = (parley(env, *c) for c in tour)

    for result in (tools, ask, hand_over, approve_plan, push_main):
        assert result.returncode == 0, result
    assert "the worker of the parley dev at" in tools.stdout, tools.stdout
    assert (
        "subagent planner may use only: create_plan, list_plans, get_plan, update_plan_status"
        in tools.stdout
    ), tools.stdout
    assert "ask-before-planning: planner -> confirm" in tools.stdout, tools.stdout
    assert "never-push-main: git_push_branch when branch=main -> deny" in tools.stdout

    assert "  planner (call" in ask.stdout, ask.stdout
    assert "rule `ask-before-planning` matched" in ask.stdout, ask.stdout
    # The planner works; its create_plan waits on this conversation, marked as its.
    assert "create_plan" in hand_over.stdout, hand_over.stdout
    assert "asked by subagent planner" in hand_over.stdout, hand_over.stdout
    assert "Q3 review" in approve_plan.stdout, approve_plan.stdout
    assert "Waiting for your decision" not in approve_plan.stdout
    assert "success create_plan" in approve_plan.stdout
    # (The model's reply is printed first, as it streams: issue 21.)
    assert any(
        line.startswith("error git_push_branch") for line in push_main.stdout.splitlines()
    ), push_main.stdout
    assert "rule `never-push-main`" in push_main.stdout, push_main.stdout
