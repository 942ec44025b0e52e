"""The id rules and names both sides agree on (``parley.contracts.names``), without a
server: a session id names one workflow and no other; a subagent's session lives in a
namespace no user can create; a call's argument digest depends on its arguments, not on
their order; a call's one-line summary stays one short line."""

from __future__ import annotations

import pytest

from parley.contracts.names import (
    args_hash,
    call_summary,
    subagent_session_id,
    subagent_tag,
    workflow_id_for,
)


def test_a_session_id_with_a_trailing_newline_names_no_workflow() -> None:
    """``$`` matches before a final newline: ``conversation-abc\n`` must not exist."""
    with pytest.raises(ValueError, match="session id"):
        workflow_id_for("abc\n")
    assert workflow_id_for("abc") == "conversation-abc"


def test_a_subagent_s_session_is_one_no_user_can_start() -> None:
    child = subagent_session_id("demo", "helper", 2)
    assert child == "demo/helper-2"
    with pytest.raises(ValueError, match="is not valid"):
        workflow_id_for(child)
    assert workflow_id_for(child, subagent=True) == "conversation-demo/helper-2"
    for forged in ("demo/helper", "demo/he lper-1", "/helper-1", "demo/helper-1/x-1"):
        with pytest.raises(ValueError, match="is not valid"):
            workflow_id_for(forged, subagent=True)
    assert subagent_tag(workflow_id_for(child, subagent=True)) == "helper-2"
    assert subagent_tag(workflow_id_for("demo")) is None


def test_the_argument_digest_is_the_arguments_not_their_order() -> None:
    digest = args_hash({"repo": "web", "branch": "feat/x"})
    assert digest == args_hash({"branch": "feat/x", "repo": "web"})
    assert digest != args_hash({"repo": "web", "branch": "feat/y"})
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert args_hash({"text": "z\u00e9"}) != args_hash({"text": "ze"})


def test_a_call_summary_is_one_short_line_of_its_plain_arguments() -> None:
    assert call_summary("git_push_branch", {"repo_alias": "web", "branch": "feat/x"}) == (
        "git_push_branch repo_alias=web branch=feat/x"
    )
    summary = call_summary("write", {"title": "a\nb", "body": "x" * 100, "tags": ["t"], "n": 3})
    assert summary == f"write title=a b body={'x' * 40} n=3"
    assert len(call_summary("t", {f"k{i}": "v" * 40 for i in range(10)})) == 120
