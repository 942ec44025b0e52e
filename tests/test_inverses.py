"""Inverse calls (issue 38): each built-in tool's inverse restores its target (the branch
gone from the remote, the worktree and its branch gone, the plan's row gone) and refuses
when the target moved on; against real git remotes in a temporary directory and the real
plans service, whose ``DELETE /plans/{id}`` is tested here too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.tools import tool

from parley.contracts import InverseCall, ToolContext
from parley.contracts.errors import ToolInputError, ToolPermissionError
from parley.services.plans import BackgroundServer
from parley.tools import ToolRegistry, confirm
from tests.support.git_remotes import (
    PREPARE,
    PUSH,
    commit_file,
    git,
    push_from_elsewhere,
    remote_commit,
    run,
)
from tests.support.plans import PLANS_KEY, USER, plans_registry, rows

MARIA = ToolContext(user_id=USER, session_id="s1", workflow_id="conversation-s1", tool_call_id="c1")
UNDO = ToolContext(user_id=USER, session_id="s1", workflow_id="conversation-s1", tool_call_id="c2")
LATER = ToolContext(user_id=USER, session_id="s1", workflow_id="conversation-s1", tool_call_id="c3")


def inverse(registry: ToolRegistry, name: str, args: dict[str, Any], payload: Any) -> InverseCall:
    tool = registry.get(name)
    assert tool is not None
    call = registry.inverse(name, tool.canonical_args(args), payload)
    assert call is not None
    return call


# --- git_push_branch -> git_delete_remote_branch -------------------------------------


async def test_the_inverse_of_a_push_deletes_the_branch_it_created(
    git_tools: ToolRegistry, demo: Path
) -> None:
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    commit_file(Path(prepared["worktree"]), "a.txt", "one\n", "Add a")
    pushed = await run(git_tools, "git_push_branch", PUSH)
    assert pushed["previous"] is None and remote_commit(demo, "feat/x") == pushed["commit"]

    call = inverse(git_tools, "git_push_branch", PUSH, pushed)
    assert call == InverseCall(
        name="git_delete_remote_branch", args={**PUSH, "expected_sha": pushed["commit"]}
    )
    assert git_tools.get(call.name).policy == "confirm"  # type: ignore[union-attr]
    preview = await git_tools.preview(call.name, call.args, MARIA)
    assert preview is not None and preview.data["deletes"] is True

    deleted = await run(git_tools, call.name, call.args)
    assert deleted["deleted"] is True and remote_commit(demo, "feat/x") is None
    # Run again (a retried activity): the branch is gone, nothing else happens.
    again = await run(git_tools, call.name, call.args)
    assert again["deleted"] is False and again["absent"] is True
    assert git(demo / "repos" / "web", "rev-parse", "main")  # the local side is untouched


async def test_the_inverse_of_a_push_refuses_a_branch_someone_pushed_to_since(
    git_tools: ToolRegistry, demo: Path, tmp_path: Path
) -> None:
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    commit_file(Path(prepared["worktree"]), "a.txt", "one\n", "Add a")
    pushed = await run(git_tools, "git_push_branch", PUSH)
    call = inverse(git_tools, "git_push_branch", PUSH, pushed)
    theirs = push_from_elsewhere(demo, "feat/x", tmp_path / "elsewhere")

    preview = await git_tools.preview(call.name, call.args, MARIA)
    assert preview is not None and "someone pushed" in str(preview.refused)
    with pytest.raises(ToolPermissionError, match="someone pushed to it since; not deleted"):
        await run(git_tools, call.name, call.args)
    assert remote_commit(demo, "feat/x") == theirs


async def test_a_push_to_a_branch_already_on_the_remote_has_no_inverse(
    git_tools: ToolRegistry,
) -> None:
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    commit_file(Path(prepared["worktree"]), "a.txt", "one\n", "Add a")
    await run(git_tools, "git_push_branch", PUSH)
    commit_file(Path(prepared["worktree"]), "b.txt", "two\n", "Add b")
    second = await run(git_tools, "git_push_branch", PUSH)
    assert second["previous"] is not None
    assert git_tools.inverse("git_push_branch", PUSH, second) is None


async def test_a_protected_branch_is_never_deleted(git_tools: ToolRegistry, demo: Path) -> None:
    main = remote_commit(demo, "main")
    args = {"project": "demo", "repo_alias": "web", "branch": "main", "expected_sha": main}
    with pytest.raises(ToolPermissionError, match="protected"):
        await run(git_tools, "git_delete_remote_branch", args)
    assert remote_commit(demo, "main") == main
    with pytest.raises(ToolInputError, match="full commit id"):
        git_tools.get("git_delete_remote_branch").canonical_args(  # type: ignore[union-attr]
            {**args, "branch": "feat/x", "expected_sha": "abc123"}
        )


# --- git_prepare_worktree -> git_remove_worktree -------------------------------------


async def test_the_inverse_of_prepare_removes_the_worktree_and_its_branch(
    git_tools: ToolRegistry, demo: Path
) -> None:
    repo = demo / "repos" / "web"
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    call = inverse(git_tools, "git_prepare_worktree", PREPARE, prepared)
    assert call == InverseCall(
        name="git_remove_worktree", args={**PUSH, "expected_sha": prepared["commit"]}
    )
    removed = await run(git_tools, call.name, call.args)
    assert removed["removed"] is True
    assert not Path(prepared["worktree"]).exists()
    assert git(repo, "branch", "--list", "feat/x") == ""
    assert "feat-x" not in git(repo, "worktree", "list")
    # The same branch can be prepared again, from scratch.
    again = await run(git_tools, "git_prepare_worktree", PREPARE)
    assert again["created"] is True
    # Preparing what exists already created nothing: no inverse.
    repeat = await run(git_tools, "git_prepare_worktree", PREPARE)
    assert git_tools.inverse("git_prepare_worktree", PREPARE, repeat) is None


async def test_the_inverse_of_prepare_refuses_a_branch_with_new_work(
    git_tools: ToolRegistry, demo: Path
) -> None:
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    worktree = Path(prepared["worktree"])
    call = inverse(git_tools, "git_prepare_worktree", PREPARE, prepared)

    (worktree / "draft.txt").write_text("not committed yet\n")
    with pytest.raises(ToolPermissionError, match="uncommitted changes"):
        await run(git_tools, call.name, call.args)
    commit = commit_file(worktree, "draft.txt", "committed\n", "Add draft")
    preview = await git_tools.preview(call.name, call.args, MARIA)
    assert preview is not None and "moved on" in str(preview.refused)
    with pytest.raises(ToolPermissionError, match="has moved on; not removed"):
        await run(git_tools, call.name, call.args)
    assert worktree.exists()
    assert git(demo / "repos" / "web", "rev-parse", "feat/x") == commit


# --- create_plan -> delete_plan ------------------------------------------------------


async def test_the_inverse_of_create_plan_deletes_the_row(plans: BackgroundServer) -> None:
    registry = plans_registry(plans)
    created = await run(registry, "create_plan", {"title": "Q3 review"}, MARIA)
    call = inverse(registry, "create_plan", {"title": "Q3 review"}, created)
    assert call == InverseCall(
        name="delete_plan", args={"plan_id": created["id"], "expected_status": "draft"}
    )
    assert registry.get("delete_plan").policy == "confirm"  # type: ignore[union-attr]
    preview = await registry.preview(call.name, call.args, MARIA)
    assert preview is not None and preview.data["deletes"] is True
    assert preview.data["row"]["title"] == "Q3 review"

    deleted = await run(registry, call.name, call.args, UNDO)
    assert deleted == {"id": created["id"], "deleted": True}
    assert rows(plans) == []
    # The same call again (a retried activity) is answered the same, not a 404.
    assert await run(registry, call.name, call.args, UNDO) == deleted


async def test_the_inverse_of_create_plan_refuses_a_plan_that_changed(
    plans: BackgroundServer,
) -> None:
    registry = plans_registry(plans)
    created = await run(registry, "create_plan", {"title": "Q3 review"}, MARIA)
    call = inverse(registry, "create_plan", {"title": "Q3 review"}, created)
    await run(registry, "update_plan_status", {"plan_id": created["id"], "status": "active"}, LATER)

    preview = await registry.preview(call.name, call.args, MARIA)
    assert preview is not None and "active now, not draft" in str(preview.refused)
    with pytest.raises(ToolInputError, match="is active now, not draft: it changed since"):
        await run(registry, call.name, call.args, UNDO)
    assert [r["id"] for r in rows(plans)] == [created["id"]]


@tool
async def note(text: str) -> str:
    """Write a note."""
    return text


def test_a_tool_without_an_inverse_has_none() -> None:
    registry = ToolRegistry([confirm(note)])
    assert registry.inverse("note", {"text": "x"}, "x") is None
    assert registry.inverse("nothing", {}, None) is None
    broken = ToolRegistry(
        [confirm(note, compensate=lambda args, result: InverseCall(name="unnote", args={}))]
    )
    with pytest.raises(ValueError, match="'unnote', which is not registered"):
        broken.inverse("note", {"text": "x"}, "x")


# --- the plans service's DELETE ------------------------------------------------------


def test_the_service_deletes_only_the_callers_plan_with_auth_and_a_log(
    plans: BackgroundServer,
) -> None:
    headers = {"Authorization": f"Bearer {PLANS_KEY}", "X-Parley-User": USER}
    with httpx.Client(base_url=plans.url, headers=headers) as http:
        plan = http.post("/plans", json={"title": "Mine"}, headers={"Idempotency-Key": "k1"}).json()
        path = f"/plans/{plan['id']}"
        assert http.delete(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        other = http.delete(path, headers={"X-Parley-User": "someone-else"})
        assert other.status_code == 404 and set(other.json()) >= {"code", "message"}
        wrong = http.delete(path, params={"expected_status": "done"})
        assert wrong.status_code == 409 and "is draft now, not done" in wrong.json()["message"]
        first = http.delete(
            path, params={"expected_status": "draft"}, headers={"Idempotency-Key": "d1"}
        )
        assert first.status_code == 200 and first.json() == {"id": plan["id"], "deleted": True}
        replay = http.delete(
            path, params={"expected_status": "draft"}, headers={"Idempotency-Key": "d1"}
        )
        assert replay.json() == first.json() and replay.headers["Idempotency-Replayed"] == "true"
        reused = http.delete(path, headers={"Idempotency-Key": "k1"})
        assert reused.status_code == 409  # a key used for another request
        assert http.delete(path).status_code == 404
        log = httpx.get(f"{plans.url}/_test/requests").json()
    deletes = [(r["status"], r["user"]) for r in log if r["method"] == "DELETE"]
    assert deletes == [
        (401, USER), (404, "someone-else"), (409, USER), (200, USER), (200, USER), (409, USER),
        (404, USER),
    ]  # fmt: skip
