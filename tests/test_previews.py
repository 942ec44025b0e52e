"""Previews (issue 38): each built-in preview shows exactly what the call then does, against
real git remotes in a temporary directory and the real plans service; a target that moved
changes the preview's hash; a push the remote would reject is refused in its preview; a
preview that fails is a failed preview in one line. The ``preview_call`` activity is
called directly and through a real worker."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from parley.activities.previews import PreviewActivities
from parley.activities.toolsets.git_commands import GitCommandError
from parley.contracts import (
    PAYLOAD_PREVIEW_BYTES,
    PREVIEW_ACTIVITY,
    PREVIEW_CALL,
    PreviewCallInput,
    ToolContext,
    ToolPreview,
    ToolSpec,
    args_hash,
)
from parley.contracts.errors import ErrorType, TransientError
from parley.services.plans import BackgroundServer
from parley.tools import ToolRegistry, auto, confirm
from tests.support.git_remotes import (
    CONTEXT,
    PREPARE,
    PUSH,
    bare,
    commit_file,
    git,
    push_from_elsewhere,
    remote_commit,
    run,
)
from tests.support.plans import create_row, inject_faults, plans_registry, rows

MARIA = ToolContext(
    user_id="maria.k-42", session_id="s1", workflow_id="conversation-s1", tool_call_id="call-1"
)


async def preview(
    registry: ToolRegistry, name: str, args: dict[str, Any], context: ToolContext = CONTEXT
) -> ToolPreview:
    tool = registry.get(name)
    assert tool is not None
    result = await registry.preview(name, tool.canonical_args(args), context)
    assert result is not None
    return result


# --- git -----------------------------------------------------------------------------


async def test_prepare_preview_shows_the_branch_then_created(
    git_tools: ToolRegistry, demo: Path
) -> None:
    seen = await preview(git_tools, "git_prepare_worktree", PREPARE)
    assert seen.status == "ok" and seen.refused is None
    main = git(demo / "repos" / "web", "rev-parse", "main")
    assert seen.data["creates"] is True and seen.data["base_commit"] == main
    assert (seen.data["branch_exists"], seen.data["worktree_exists"]) == (False, False)
    assert seen.data["base_subject"] == "Initial commit of web"

    ran = await run(git_tools, "git_prepare_worktree", PREPARE)
    assert (ran["branch"], ran["worktree"], ran["base"]) == (
        seen.data["branch"], seen.data["worktree"], seen.data["base"]
    )  # fmt: skip
    assert ran["commit"] == seen.data["base_commit"] and ran["created"] is True

    again = await preview(git_tools, "git_prepare_worktree", PREPARE)
    assert again.data["creates"] is False and again.data["worktree_exists"] is True
    assert again.hash != seen.hash


async def test_prepare_preview_refuses_what_the_run_refuses(
    git_tools: ToolRegistry, demo: Path
) -> None:
    git(demo / "repos" / "web", "branch", "feat/x", "main")
    seen = await preview(git_tools, "git_prepare_worktree", PREPARE)
    assert seen.status == "ok" and "already exists" in str(seen.refused)
    other = {**PREPARE, "branch_slug": "y", "base_branch": "nope"}
    missing = await preview(git_tools, "git_prepare_worktree", other)
    assert "does not exist" in str(missing.refused)
    alias = await preview(git_tools, "git_prepare_worktree", {**PREPARE, "repo_alias": "mobile"})
    assert "not registered" in str(alias.refused)


async def test_push_preview_shows_exactly_the_commits_then_pushed(
    git_tools: ToolRegistry, demo: Path
) -> None:
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    worktree = Path(prepared["worktree"])
    first = commit_file(worktree, "a.txt", "one\ntwo\n", "Add a")
    second = commit_file(worktree, "b.txt", "three\n", "Add b")

    seen = await preview(git_tools, "git_push_branch", PUSH)
    assert seen.status == "ok" and seen.refused is None
    assert seen.data["remote_commit"] is None and seen.data["against"] == "main"
    assert [c["sha"] for c in seen.data["commits"]] == [second, first]
    assert [c["subject"] for c in seen.data["commits"]] == ["Add b", "Add a"]
    assert seen.data["diffstat"]["files_changed"] == 2
    assert (seen.data["diffstat"]["insertions"], seen.data["diffstat"]["deletions"]) == (3, 0)

    ran = await run(git_tools, "git_push_branch", PUSH)
    assert ran["commit"] == seen.data["commit"] == remote_commit(demo, "feat/x")
    remote = bare(demo)
    pushed = git(remote, "log", "--format=%H", f"{prepared['commit']}..feat/x").split()
    assert pushed == [c["sha"] for c in seen.data["commits"]]
    numstat = git(remote, "diff", "--numstat", prepared["commit"], "feat/x").splitlines()
    assert sorted(line.split("\t")[2] for line in numstat) == sorted(
        f["path"] for f in seen.data["diffstat"]["files"]
    )

    after = await preview(git_tools, "git_push_branch", PUSH)
    assert after.data["up_to_date"] is True and after.data["commits"] == []
    assert after.hash != seen.hash


async def test_a_remote_that_moved_changes_the_hash_and_a_non_fast_forward_is_refused(
    git_tools: ToolRegistry, demo: Path, tmp_path: Path
) -> None:
    prepared = await run(git_tools, "git_prepare_worktree", PREPARE)
    worktree = Path(prepared["worktree"])
    commit_file(worktree, "a.txt", "one\n", "Add a")
    await run(git_tools, "git_push_branch", PUSH)
    mine = commit_file(worktree, "b.txt", "two\n", "Add b")
    before = await preview(git_tools, "git_push_branch", PUSH)
    assert before.refused is None and [c["sha"] for c in before.data["commits"]] == [mine]
    assert before.data["against"] == "origin/feat/x"

    theirs = push_from_elsewhere(demo, "feat/x", tmp_path / "elsewhere")
    after = await preview(git_tools, "git_push_branch", PUSH)
    assert after.hash != before.hash
    assert after.data["remote_commit"] == theirs
    assert "not a fast-forward" in str(after.refused) and theirs[:12] in str(after.refused)
    # The preview said what the run finds: the remote rejects the push.
    with pytest.raises(GitCommandError, match="rejected"):
        await run(git_tools, "git_push_branch", PUSH)
    assert remote_commit(demo, "feat/x") == theirs


async def test_push_preview_refuses_protected_and_unprepared_branches(
    git_tools: ToolRegistry,
) -> None:
    protected = await preview(git_tools, "git_push_branch", {**PUSH, "branch": "main"})
    assert "protected" in str(protected.refused)
    unprepared = await preview(git_tools, "git_push_branch", PUSH)
    assert "not prepared" in str(unprepared.refused)


# --- plans ---------------------------------------------------------------------------


async def test_create_plan_preview_shows_the_row_then_written(plans: BackgroundServer) -> None:
    registry = plans_registry(plans)
    older = create_row(plans, "Q3 review")
    args = {"title": "please create a plan called Q3 review", "due_date": "2030-09-30"}
    seen = await preview(registry, "create_plan", args, MARIA)
    assert seen.status == "ok"
    assert seen.data["same_title"] == [
        {"id": older["id"], "title": "Q3 review", "status": "draft", "due_date": None}
    ]
    assert seen.data["same_title_count"] == 1
    assert [r["id"] for r in rows(plans)] == [older["id"]]  # the preview wrote nothing

    created = await run(registry, "create_plan", args, MARIA)
    row = seen.data["row"]
    assert {key: created[key] for key in row} == row
    assert row["title"] == "Q3 review" and row["user_id"] == MARIA.user_id

    again = await preview(registry, "create_plan", args, MARIA)
    assert again.data["same_title_count"] == 2 and again.hash != seen.hash


async def test_a_backend_that_is_down_is_a_failed_transient_preview(
    plans: BackgroundServer,
) -> None:
    registry = plans_registry(plans)
    inject_faults(plans, {"status": 503, "body": {"message": "down for maintenance"}})
    seen = await preview(registry, "create_plan", {"title": "Q4"}, MARIA)
    assert seen.status == "failed" and seen.error_type == ErrorType.TOOL_TRANSIENT
    assert "503" in str(seen.error) and "\n" not in str(seen.error)
    assert seen.data is None


# --- failures, bounds, the catalogue -------------------------------------------------


@tool
async def write_note(text: str) -> str:
    """Write a note."""
    return text


async def _raising(args: dict[str, Any], context: ToolContext) -> Any:
    raise RuntimeError("cannot read\nthe target: key sk-abcdefghijklmnop123 refused")


async def _huge(args: dict[str, Any], context: ToolContext) -> Any:
    return {"lines": [f"{i}: {args['text']}" for i in range(5_000)]}


async def test_a_preview_that_raises_is_failed_in_one_redacted_line() -> None:
    registry = ToolRegistry([confirm(write_note, preview=_raising)])
    seen = await preview(registry, "write_note", {"text": "hi"})
    assert seen.status == "failed" and seen.error_type == ErrorType.TOOL_FAILED
    assert seen.error is not None and "\n" not in seen.error
    assert seen.error.startswith("RuntimeError: cannot read the target")
    assert "sk-abcdefghijklmnop123" not in seen.error and "[redacted]" in seen.error
    assert "Traceback" not in seen.error and seen.args_hash == args_hash({"text": "hi"})


async def test_a_large_preview_is_cut_and_hashed_whole() -> None:
    registry = ToolRegistry([confirm(write_note, preview=_huge)])
    short = await preview(registry, "write_note", {"text": "a"})
    other = await preview(registry, "write_note", {"text": "b"})
    assert short.truncated and isinstance(short.data, str)
    assert len(short.data.encode()) <= PAYLOAD_PREVIEW_BYTES < (short.data_bytes or 0)
    assert short.hash != other.hash  # the whole data is hashed, not the cut


async def test_no_preview_and_arguments_not_canonical() -> None:
    registry = ToolRegistry([auto(write_note)])
    assert await registry.preview("write_note", {"text": "x"}, CONTEXT) is None
    assert await registry.preview("nothing", {}, CONTEXT) is None
    typed = ToolRegistry([confirm(write_note, preview=_huge)])
    seen = await typed.preview("write_note", {"text": "x", "force": True}, CONTEXT)
    assert seen is not None and seen.status == "failed"
    assert seen.error_type == ErrorType.TOOL_INPUT and "force" in str(seen.error)


def test_the_catalogue_says_which_tools_preview_and_keeps_its_version(
    git_tools: ToolRegistry,
) -> None:
    specs = {s.name: s for s in git_tools.catalogue().tools}
    assert (specs["git_push_branch"].has_preview, specs["git_push_branch"].has_inverse) == (
        True, True
    )  # fmt: skip
    assert specs["git_list_project_repositories"].has_preview is False
    assert specs["git_delete_remote_branch"].has_inverse is False
    # A tool that declares neither (and no MCP server) digests as before the flags existed.
    bare_spec = ToolRegistry([confirm(write_note)]).catalogue()
    old = bare_spec.tools[0].model_dump(mode="json")
    del old["has_preview"], old["has_inverse"], old["server"]
    digest = hashlib.sha256(json.dumps([old], sort_keys=True).encode()).hexdigest()[:16]
    assert bare_spec.version == digest
    # A spec written before the flags reads with both False.
    assert ToolSpec.model_validate({k: v for k, v in old.items()}).has_preview is False


# --- the activity --------------------------------------------------------------------


def _request(name: str, args: dict[str, Any], digest: str | None = None) -> PreviewCallInput:
    return PreviewCallInput(
        name=name, args=args, args_hash=digest or args_hash(args), tool_call_id="call-1",
        user_id="u1", session_id="s",
    )  # fmt: skip


async def test_the_activity_called_directly(git_tools: ToolRegistry) -> None:
    activities = PreviewActivities(git_tools)
    seen = await activities.preview_call(_request("git_push_branch", PUSH))
    assert seen.status == "ok" and "not prepared" in str(seen.refused)
    assert seen.args_hash == args_hash(PUSH)
    for request, problem in [
        (_request("git_push_branch", PUSH, "0" * 16), "hash to"),
        (_request("git_list_project_repositories", {"project": "demo"}), "declares no preview"),
        (_request("nothing", {}), "not registered"),
    ]:
        failed = await activities.preview_call(request)
        assert failed.status == "failed" and problem in str(failed.error)


@workflow.defn(name="PreviewProbe")
class PreviewProbe:
    """Runs one preview, as the conversation will: by the activity's name and config."""

    @workflow.run
    async def run(self, request: PreviewCallInput) -> ToolPreview:
        return await workflow.execute_activity(
            PREVIEW_CALL, request, result_type=ToolPreview,
            **PREVIEW_ACTIVITY.options(summary=f"preview {request.name}"),
        )  # fmt: skip


async def test_the_activity_on_a_real_worker_retries_a_transient_failure(client: Client) -> None:
    calls: list[str] = []

    async def flaky(args: dict[str, Any], context: ToolContext) -> Any:
        calls.append(context.tool_call_id)
        if len(calls) == 1:
            raise TransientError("the backend is busy (HTTP 503)")
        return {"note": args["text"], "for": context.user_id, "attempts": len(calls)}

    registry = ToolRegistry([confirm(write_note, preview=flaky)])
    queue = f"previews-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[PreviewProbe],
        activities=[PreviewActivities(registry).preview_call],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        handle = await client.start_workflow(
            PreviewProbe.run, _request("write_note", {"text": "hi"}),
            id=f"preview-probe-{uuid.uuid4().hex[:8]}", task_queue=queue,
            execution_timeout=timedelta(minutes=2),
        )  # fmt: skip
        seen = await handle.result()
    assert seen.status == "ok" and seen.data == {"note": "hi", "for": "u1", "attempts": 2}
    assert calls == ["call-1", "call-1"]


async def test_the_activity_reports_a_transient_failure_when_no_attempt_is_left() -> None:
    async def busy(args: dict[str, Any], context: ToolContext) -> Any:
        raise TransientError("the backend is busy (HTTP 503)")

    activities = PreviewActivities(ToolRegistry([confirm(write_note, preview=busy)]))
    seen = await activities.preview_call(_request("write_note", {"text": "hi"}))
    assert seen.status == "failed" and seen.error_type == ErrorType.TOOL_TRANSIENT
    assert seen.error == "TransientError: the backend is busy (HTTP 503)"
