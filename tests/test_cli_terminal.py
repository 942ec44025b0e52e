"""End to end: what the CLI prints for a user, against a real `parley dev`
(tests.support.dev): `chat` on a pseudo-terminal (approval prompts, respond, Ctrl-C),
`show`'s whole messages and arguments at any width, and `respond`'s wording."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.support.cli import parley
from tests.support.dev import parley_all, without_paths
from tests.support.processes import PARLEY
from tests.support.terminal import Terminal


def test_respond_says_it_responded(dev_server) -> None:
    """``respond`` answers the call with the user's words: the CLI says "responded", in
    the turn it prints and in ``show``'s transcript, never "rejected"."""
    env = without_paths(dev_server)
    who = ["--session", "cli-respond", "--user", "jill"]
    proposed = parley(env, "send", *who, "prepare a feat branch respond-words in web")
    assert "git_prepare_worktree" in proposed.stdout, proposed
    responded = parley(env, "respond", *who, "--message", "I made that branch myself")
    assert responded.returncode == 0, responded.stderr
    first = responded.stdout.splitlines()[0]
    assert first.startswith("responded git_prepare_worktree (call"), responded.stdout
    assert "rejected" not in responded.stdout
    shown = parley(env, "show", *who)
    lines = shown.stdout.splitlines()  # each message numbered: "3   tool …"
    (tool_line,) = [line for line in lines if line.lstrip(" 0123456789").startswith("tool ")]
    assert "git_prepare_worktree" in tool_line and " responded" in tool_line, shown.stdout
    assert "rejected" not in shown.stdout.split("Audit log")[0]


def test_chat_answers_approval_prompts(dev_server) -> None:
    env = without_paths(dev_server)
    typed = "\n".join(
        [
            "prepare a fix branch chat-change in api",
            "maybe",  # not an answer: asked again
            "edit",
            "{not json",  # refused, asked again
            '{"project": "demo", "repo_alias": "api", "branch_kind": "fix",'
            ' "branch_slug": "chat-edited"}',
            "/show",
            "/quit",
        ]
    )
    result = subprocess.run(
        [*PARLEY, "chat", "--session", "cli-chat", "--user", "carol"],
        input=typed + "\n",
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "git_prepare_worktree" in result.stdout
    assert "Please answer approve, edit, reject or respond" in result.stdout
    assert "not JSON" in result.stdout
    # carol edited her own call: the result says the owner changed the arguments.
    assert "fix/chat-edited" in result.stdout
    assert "carol, the owner, changed the arguments" in result.stdout
    assert "status idle" in result.stdout


def test_show_prints_no_warnings(dev_server) -> None:
    env = without_paths(dev_server)
    who = ["--session", "cli-show", "--user", "erin"]
    assert parley(env, "send", *who, "list the repositories of project demo").returncode == 0
    shown = parley(env, "show", *who)
    assert shown.returncode == 0 and shown.stderr == ""
    assert "git_list_project_repositories" in shown.stdout


# --- a terminal, for `parley chat` ----------------------------------------------------


@pytest.fixture
def terminals() -> Iterator[Callable[..., Terminal]]:
    opened: list[Terminal] = []

    def open_terminal(*args: str, env: dict[str, str], columns: int = 200) -> Terminal:
        opened.append(Terminal([*PARLEY, *args], env, columns))
        return opened[-1]

    yield open_terminal
    for terminal in opened:
        terminal.close()


ASK_DECISION = "approve, edit, reject or respond? [a/e/r/s] "


def test_chat_respond_works_show_prints_the_conversation_and_ctrl_c_leaves(
    dev_server, terminals
) -> None:
    env = without_paths(dev_server)
    long_detail = "budget-" + "0123456789" * 30  # one long word: nothing may cut it
    chat = terminals("chat", "--session", "cli-chat-respond", "--user", "gina", env=env, columns=40)
    chat.expect("you> ")
    chat.type(f"please create a plan called Budget for next week; details {long_detail}\n")
    shown = chat.expect(ASK_DECISION)
    assert "create_plan" in shown and long_detail in shown  # the whole args, at 40 columns
    chat.type("respond\n")  # the word, not refused any more
    chat.expect("your answer for the model: ")
    chat.type("not now, ask me tomorrow\n")
    assert "Understood: create_plan was not run. not now, ask me tomorrow" in chat.expect("you> ")

    chat.type("prepare a feat branch chat-respond in web\n")
    chat.expect(ASK_DECISION)
    chat.type("s\n")  # respond's one-letter shortcut
    chat.expect("your answer for the model: ")
    chat.type("use the api repository instead\n")
    assert "git_prepare_worktree was not run" in chat.expect("you> ")

    chat.type("/show\n")
    shown = chat.expect("you> ")
    assert "cli-chat-respond (gina): status idle" in shown
    assert " human prepare a feat branch chat-respond in web" in shown  # the messages
    assert "git_prepare_worktree" in shown and "responded" in shown  # its result
    assert "rejected" not in shown
    assert "use the api repository instead" in shown

    chat.type("\x03")  # Ctrl-C at the prompt: it leaves without waiting for an Enter
    assert chat.wait(timeout=30) == 130
    assert "Traceback" not in chat.output and "interrupted" in chat.output


def test_chat_ctrl_c_at_a_decision_prompt_leaves_the_call_pending(dev_server, terminals) -> None:
    env = without_paths(dev_server)
    who = ["--session", "cli-chat-interrupt", "--user", "hank"]
    chat = terminals("chat", *who, env=env)
    chat.expect("you> ")
    chat.type("prepare a feat branch chat-interrupt in api\n")
    chat.expect(ASK_DECISION)
    chat.type("\x03")  # no Enter follows: only Ctrl-C can end it
    assert chat.wait(timeout=30) == 130
    assert "Traceback" not in chat.output

    again = terminals("chat", *who, env=env)  # the call still waits: asked at once
    assert "git_prepare_worktree" in again.expect(ASK_DECISION)
    again.type("/quit\n")
    assert again.wait(timeout=10) == 0


def test_show_prints_whole_messages_each_result_once_and_the_audit_log(dev_server) -> None:
    env = {**without_paths(dev_server), "COLUMNS": "40"}
    who = ["--session", "cli-show-whole", "--user", "lee"]
    long_text = "notes " + json.dumps({"items": [f"item number {i}" for i in range(60)]})
    assert len(long_text) > 1000
    assert parley(env, "send", *who, "list the repositories of project demo").returncode == 0
    assert parley(env, "send", *who, long_text).returncode == 0

    as_json, shown = parley_all(env, ["show", *who, "--json"], ["show", *who])
    transcript = json.loads(as_json.stdout)["transcript"]
    (result,) = [m["content"] for m in transcript if m["type"] == "tool"]
    assert shown.returncode == 0 and shown.stderr == ""
    assert long_text in shown.stdout  # whole, not cut at 300 characters or at 40 columns
    assert shown.stdout.count(result) == 1  # the reply quotes it: printed once
    audit = shown.stdout[shown.stdout.index("Audit log") :]
    for event in ("message", "proposed", "ran"):
        assert f"  {event} " in audit, audit
    assert "git_list_project_repositories  (call_" in audit


def test_pending_args_are_whole_at_any_terminal_width(dev_server) -> None:
    env = {**without_paths(dev_server), "COLUMNS": "40"}
    who = ["--session", "cli-narrow", "--user", "max"]
    long_value = "quarterly-" + "x" * 300
    sent = parley(env, "send", *who, f"please create a plan called {long_value} for next week")
    assert sent.returncode == 0, sent.stderr
    as_json, shown = parley_all(env, ["show", *who, "--json"], ["show", *who])
    (pending,) = json.loads(as_json.stdout)["pending"]
    values = [v for v in pending["args"].values() if isinstance(v, str)]
    assert any(long_value in v for v in values)
    for output in (sent.stdout, shown.stdout):
        assert "Waiting for your decision" in output and pending["tool_call_id"] in output
        for value in values:
            assert value in output  # never cut, never folded
