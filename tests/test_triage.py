"""Triage and the strict inputs, without a server: a proposal or an edit is judged on
its canonical arguments by the same rules; an input with a key it does not define is
refused in one line, never ignored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import pytest
from langchain_core.tools import InjectedToolArg, tool

from parley.activities.toolsets.git import canonical_push_args
from parley.activities.toolsets.plans import prepare_create_plan_args
from parley.contracts import (
    DecideInput,
    PolicyRule,
    RememberedDecision,
    ToolCall,
    ToolContext,
    args_hash,
    call_shape,
    subagent_session_id,
    workflow_id_for,
)
from parley.contracts.errors import ErrorType, InvalidDecision, ToolInputError
from parley.tools import ParleyTool, ToolRegistry, UnstableCanonicalForm
from parley.workflows.rules import gate
from parley.workflows.rules.triage import Proposal, Refuse, Run, Wait, triage

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


@tool
def push(branch: str, context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """Push a branch."""
    return branch


RULES = [
    PolicyRule(name="no-secrets", tool="push", args={"branch": "secret-*"}, decide="deny"),
    PolicyRule(
        name="prod-review",
        tool="push",
        args={"branch": "prod-*"},
        decide="confirm",
        requires_reviewer=True,
    ),
    PolicyRule(name="feat-auto", tool="push", args={"branch": "feat/*"}, decide="auto"),
]


def proposal(remembered: list[RememberedDecision] | None = None) -> Proposal:
    catalogue = ToolRegistry([ParleyTool(push)], rules=RULES).catalogue()
    return Proposal(
        catalogue=catalogue,
        remembered=remembered or [],
        now=NOW,
        expiry_seconds=60,
        owner="alice",
        reviewers=["rita"],
    )


def push_call(branch: str) -> ToolCall:
    return ToolCall(tool_call_id="c1", name="push", args={"branch": branch})


def test_a_proposal_is_refused_run_or_kept_waiting_by_the_rules() -> None:
    refused = triage(push_call("secret-x"), proposal())
    assert isinstance(refused, Refuse) and "rule `no-secrets`" in refused.message
    assert refused.error_type == ErrorType.TOOL_PERMISSION
    assert isinstance(triage(push_call("feat/x"), proposal()), Run)
    waiting = triage(push_call("prod-x"), proposal())
    assert isinstance(waiting, Wait)
    assert waiting.call.reviewer_rule == "prod-review"
    assert waiting.call.args_hash == args_hash({"branch": "prod-x"})
    # the tool's own policy (confirm) when no rule matches
    other = triage(push_call("main"), proposal())
    assert isinstance(other, Wait) and other.call.reviewer_rule is None


def test_an_edit_is_a_new_proposal_judged_with_its_editor() -> None:
    denied = triage(push_call("secret-x"), proposal(), edited_by="alice")
    assert isinstance(denied, Refuse) and "no-secrets" in denied.message
    # the owner's edit into a reviewer rule waits for a reviewer; a reviewer's runs
    by_owner = triage(push_call("prod-x"), proposal(), edited_by="alice")
    assert isinstance(by_owner, Wait) and by_owner.call.edited_by == "alice"
    assert isinstance(triage(push_call("prod-x"), proposal(), edited_by="rita"), Run)
    # an edit into a plain confirm is the editor's approval
    assert isinstance(triage(push_call("main"), proposal(), edited_by="alice"), Run)


def test_a_remembered_rejection_refuses_the_same_shape_only() -> None:
    remembered = RememberedDecision(
        shape=call_shape("push", {"branch": "main"}),
        policy="deny",
        decided_by="alice",
        tool_call_id="c0",
    )
    assert isinstance(triage(push_call("main"), proposal([remembered])), Refuse)
    assert isinstance(triage(push_call("dev"), proposal([remembered])), Wait)


def test_canonical_args_validate_normalize_and_settle() -> None:
    git_push = ParleyTool(push, prepare=canonical_push_args)
    assert git_push.canonical_args({"branch": " refs/heads/refs/heads/FEAT/x "}) == {
        "branch": "feat/x"
    }
    assert git_push.canonical_args({"branch": "ｆｅａｔ/ｘ"}) == {"branch": "feat/x"}
    with pytest.raises(ToolInputError, match="force"):
        git_push.canonical_args({"branch": "x", "force": True})  # never silently dropped
    with pytest.raises(ToolInputError, match="branch"):
        git_push.canonical_args({})
    # a prepare that never settles refuses the call rather than run some other form
    growing = ParleyTool(push, prepare=lambda args: {"branch": args["branch"] + "!"})
    with pytest.raises(UnstableCanonicalForm):
        growing.canonical_args({"branch": "x"})


def test_a_doubled_title_prefix_is_canonical_once() -> None:
    first = prepare_create_plan_args({"title": "title: title: prod-x"})
    assert first["title"] != "prod-x"  # one pass is not a fixed point...

    @tool
    def create_plan(title: str, description: str | None = None) -> str:
        """Create a plan."""
        return title

    tool_ = ParleyTool(create_plan, prepare=prepare_create_plan_args)
    canonical = tool_.canonical_args({"title": "title: title: prod-x"})
    assert canonical["title"] == "prod-x"  # ...the canonical form is
    assert tool_.canonical_args(canonical) == canonical


def test_strict_inputs_refuse_unknown_keys_in_one_line() -> None:
    approve_with_args = {
        "decisions": [{"tool_call_id": "c1", "action": "approve", "args": {"branch": "x"}}],
        "decided_by": "alice",
    }
    with pytest.raises(InvalidDecision) as refused:
        gate.parse(DecideInput, approve_with_args, InvalidDecision)
    assert "takes no args" in refused.value.message
    typo = {
        "decisions": [{"tool_call_id": "c1", "action": "reject", "mesage": "no"}],
        "decided_by": "alice",
    }
    with pytest.raises(InvalidDecision) as refused:
        gate.parse(DecideInput, typo, InvalidDecision)
    assert "decisions.0.mesage: Extra inputs are not permitted" in refused.value.message
    assert "pydantic.dev" not in refused.value.message
    assert "\n" not in refused.value.message
    assert refused.value.non_retryable
    with pytest.raises(InvalidDecision):
        gate.parse(DecideInput, "approve", InvalidDecision)


def test_subagent_ids_live_where_no_user_can_create_one() -> None:
    child = subagent_session_id("demo", "helper", 1)
    assert child == "demo/helper-1"
    with pytest.raises(ValueError):
        workflow_id_for(child)  # what the CLI, the gateway and the client accept
    assert workflow_id_for(child, subagent=True) == "conversation-demo/helper-1"
