"""End to end: the README's tours, as written there: `parley dev` with the example
policy file (docs/examples/policies.toml), then the README's commands in another shell,
each checked for what it should show: the policy file and a subagent; the offline
model's streaming, token usage and spend mark, `--while-busy`, the numbered transcript,
fork and rewind."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import parley
from tests.support.dev import running_dev_server, without_paths
from tests.support.processes import PARLEY, ROOT

EXAMPLE = "docs/examples/policies.toml"
DEV_LINE = f"PARLEY_POLICIES={EXAMPLE} parley dev"
README = ROOT / "README.md"
#: A line of each tour's block, which tells the two apart.
POLICY_TOUR = "ask the planner"
OFFLINE_TOUR = "tell me a story"


def tour_block(marker: str) -> str:
    """The README's code block that starts `parley dev` with the example policy file and
    holds ``marker``."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if DEV_LINE in b and marker in b]
    return block


def readme_tour() -> list[list[str]]:
    """The commands of the policy file's tour, each as its arguments after `parley`
    (comments left out)."""
    commands = []
    for line in tour_block(POLICY_TOUR).splitlines():
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
    # (The model's reply is printed first, as it streams.)
    assert any(
        line.startswith("error git_push_branch") for line in push_main.stdout.splitlines()
    ), push_main.stdout
    assert "rule `never-push-main`" in push_main.stdout, push_main.stdout


def run_tour(
    block: str, env: dict[str, str], cwd: Path
) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """Run a tour's lines in order, as a shell would, in ``cwd``: ``parley …`` with the
    console script (a line ending in ``&`` in the background, until ``wait``), any other
    line (``seq … > notes.md``, ``sleep``) with bash. The `parley dev` line is the
    fixture's. Each line with what it printed."""
    done: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    background: list[tuple[str, subprocess.Popen[str]]] = []

    def join() -> None:
        for line, process in background:
            stdout, stderr = process.communicate(timeout=120)
            done.append(
                (line, subprocess.CompletedProcess(line, process.returncode, stdout, stderr))
            )
        background.clear()

    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if not words or line.startswith(DEV_LINE):
            continue
        if words == ["wait"]:
            join()
        elif words[0] == "parley" and words[-1] == "&":
            argv = [*PARLEY, *words[1:-1]]
            process = subprocess.Popen(
                argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            background.append((line, process))
        elif words[0] == "parley":
            argv = [*PARLEY, *words[1:]]
            ran = subprocess.run(
                argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
            )
            done.append((line, ran))
        else:
            shell = {**env, "PATH": f"{Path(PARLEY[0]).parent}:{env.get('PATH', '')}"}
            ran = subprocess.run(
                ["bash", "-c", line], cwd=cwd, env=shell, capture_output=True, text=True, timeout=60
            )
            done.append((line, ran))
    join()
    return done


def test_the_readme_tour_of_the_offline_model(dev_with_policies, tmp_path: Path) -> None:
    """The offline model streams its replies a word at a time and reports (estimated)
    token usage, so the tour shows streaming, usage, a spend mark passed and approved,
    `--while-busy enqueue`, the numbered transcript, fork and rewind, as the README
    writes them (its `send --file notes.md` reads the file the tour makes)."""
    env = {k: v for k, v in without_paths(dev_with_policies).items() if k != "PARLEY_POLICIES"}
    ran = run_tour(tour_block(OFFLINE_TOUR), env, tmp_path)
    for line, result in ran:
        assert result.returncode == 0, (line, result.stdout, result.stderr)

    def output(fragment: str, nth: int = 0) -> str:
        return [result.stdout for line, result in ran if fragment in line][nth]

    assert (tmp_path / "notes.md").stat().st_size > 4_000
    # Streaming: the story reached the conversation in many deltas, as a provider's does.
    deltas: dict[str, int] = {}
    for line in output("parley events").splitlines():
        event = json.loads(line)["event"]
        if event.get("type") == "TEXT_MESSAGE_CONTENT":
            deltas[event["messageId"]] = deltas.get(event["messageId"], 0) + 1
    assert max(deltas.values()) >= 5, deltas
    assert "Once upon a time" in output('"tell me a story"')
    # --while-busy enqueue: the message waited for the story's turn, then ran.
    assert "git_list_project_repositories" in output("--while-busy enqueue")
    # Usage, estimated; past the spend mark, the next message waits for an approval.
    shown = output("parley show --session offline --user alice")
    (usage,) = [line for line in shown.splitlines() if line.startswith("usage:")]
    tokens = re.search(r"usage: ([\d,]+) tokens", usage)
    assert tokens and int(tokens.group(1).replace(",", "")) > 2_000, usage
    assert "estimated" in usage, usage
    assert "parley-spend-2000-" in output('"hello again"'), output('"hello again"')
    assert "offline model" in output("parley approve")
    # One numbering: show's header and numbers, fork --at and rewind --to count alike.
    message_line = r"\s*\d+ +(human|ai|tool) "
    page = output("--offset 4 --limit 4")
    assert "messages 5-8 of " in page, page
    numbered = [line.split()[0] for line in page.splitlines() if re.match(message_line, line)]
    assert numbered == ["5", "6", "7", "8"], page
    assert "starts with the first 4 messages of offline" in output("parley fork")
    final = output("parley show --session offline --user alice", -1)
    lines = [line for line in final.splitlines() if re.match(message_line, line)]
    assert [line.split()[0] for line in lines] == ["1", "2", "3", "4"], final
    assert "Once upon a time" in lines[-1]
    assert re.search(r"Audit log \(entries 1-\d+ of \d+\)", final), final


def test_the_readme_quick_start_talks_as_written(tmp_path: Path) -> None:
    """The quick start's "Talking to it" block, as written, against a plain `parley dev`
    (no policy file): each command succeeds and does what its comment says; `chat` with
    no terminal input leaves at once."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if "--session demo --user alice" in b]
    with running_dev_server(tmp_path / "dev", cwd=ROOT) as server:
        ran = run_tour(block, without_paths(server), tmp_path)
    for line, result in ran:
        assert result.returncode == 0, (line, result.stdout, result.stderr)

    def output(fragment: str) -> str:
        return next(result.stdout for line, result in ran if fragment in line)

    assert "web" in output('"list the repositories of project demo"')
    assert "git_prepare_worktree" in output('"prepare a feat branch')
    assert "success git_prepare_worktree" in output("parley approve")
    assert "git_push_branch" in output('"push it"')
    assert "rejected git_push_branch" in output("parley reject")
    assert "create_plan" in output('"please create a plan')
    assert (tmp_path / "notes.md").read_text().startswith("The release review")
    shown = output("parley show")
    assert "release review moved to Thursday" in shown and "Audit log" in shown, shown
    assert "demo" in output("parley list")
