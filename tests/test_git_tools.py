"""The git toolset against real repositories and a real local bare remote (no mocks)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from parley.activities.toolsets.git import (
    build_git_toolset,
    create_demo_projects,
    load_registry,
    toolset,
)
from parley.config.settings import Settings
from parley.contracts import ToolContext
from parley.contracts.errors import ToolInputError, ToolPermissionError
from parley.tools import CONTEXT_ARG, ParleyTool
from parley.tools.loading import GitConfig

CONTEXT = ToolContext(user_id="u1", session_id="s", workflow_id="conversation-s", tool_call_id="c1")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    return create_demo_projects(tmp_path / "data")


@pytest.fixture
def tools(registry: Path) -> dict[str, ParleyTool]:
    return {t.name: t for t in build_git_toolset(registry)}


async def call(tools: dict[str, ParleyTool], name: str, **args: Any) -> Any:
    """Invoke a tool the way the run_tool activity does: args plus the injected context."""
    return await tools[name].tool.ainvoke({**args, CONTEXT_ARG: CONTEXT})


async def prepare(tools: dict[str, ParleyTool], **args: Any) -> dict[str, Any]:
    defaults = {"project": "demo", "repo_alias": "web", "branch_kind": "feat", "branch_slug": "x"}
    return await call(tools, "git_prepare_worktree", **{**defaults, **args})


def test_toolset_shape(tools: dict[str, ParleyTool]) -> None:
    assert {name: t.policy for name, t in tools.items()} == {
        "git_list_project_repositories": "auto",
        "git_prepare_worktree": "confirm",
        "git_push_branch": "confirm",
        "git_remove_worktree": "confirm",  # the inverses (tests/test_inverses.py)
        "git_delete_remote_branch": "confirm",
    }
    for t in tools.values():
        assert t.wants_context
        assert CONTEXT_ARG not in t.tool.tool_call_schema.model_json_schema()["properties"]


def test_demo_projects_are_idempotent(tmp_path: Path) -> None:
    first = create_demo_projects(tmp_path)
    head = git(tmp_path / "repos" / "web", "rev-parse", "HEAD")
    assert create_demo_projects(tmp_path) == first == tmp_path / "projects.json"
    assert git(tmp_path / "repos" / "web", "rev-parse", "HEAD") == head
    assert git(tmp_path / "remotes" / "api.git", "rev-parse", "refs/heads/main")


async def test_list_repositories(tools: dict[str, ParleyTool], registry: Path) -> None:
    result = await call(tools, "git_list_project_repositories", project="demo")
    assert result["project"] == "demo"
    assert [r["alias"] for r in result["repositories"]] == ["web", "api"]
    web = result["repositories"][0]
    assert Path(web["path"]) == (registry.parent / "repos" / "web").resolve()
    assert web["remote"] == "origin"
    assert web["default_branch"] == "main"
    assert web["protected_branches"] == ["main", "release/*"]


async def test_prepare_worktree_is_idempotent(tools: dict[str, ParleyTool], registry: Path) -> None:
    repo = registry.parent / "repos" / "web"
    first = await prepare(tools)
    worktree = Path(first["worktree"])
    assert first["branch"] == "feat/x"
    assert first["created"] is True
    assert first["base"] == "main"
    assert first["commit"] == git(repo, "rev-parse", "main")
    assert worktree == (registry.parent / "worktrees" / "demo" / "web" / "feat-x").resolve()
    assert git(worktree, "rev-parse", "--show-toplevel") == str(worktree)  # a real checkout
    assert git(repo, "rev-parse", "--verify", "refs/heads/feat/x") == first["commit"]
    assert git(worktree, "branch", "--show-current") == "feat/x"

    second = await prepare(tools)
    assert second == {**first, "created": False}


async def test_prepare_from_another_base(tools: dict[str, ParleyTool], registry: Path) -> None:
    repo = registry.parent / "repos" / "api"
    git(repo, "branch", "develop", "main")
    result = await prepare(tools, repo_alias="api", branch_kind="fix", base_branch="develop")
    assert (result["branch"], result["base"]) == ("fix/x", "develop")
    again = await prepare(tools, repo_alias="api", branch_kind="fix")
    assert again["base"] == "develop" and again["created"] is False


async def test_slug_is_lower_cased_first(tools: dict[str, ParleyTool]) -> None:
    result = await prepare(tools, branch_kind="FEAT", branch_slug=" PJ1-project-git-extend ")
    assert result["branch"] == "feat/pj1-project-git-extend"
    assert result["worktree"].endswith("feat-pj1-project-git-extend")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"branch_slug": "feat x!"}, "kebab-case"),
        ({"branch_slug": "a" * 49}, "1-48 characters"),
        ({"branch_slug": "a--b"}, "kebab-case"),
        ({"branch_kind": "feature"}, "feat, fix, chore, docs, refactor, test"),
        ({"project": "nope"}, "known projects: demo"),
        ({"base_branch": "does-not-exist"}, "does not exist"),
    ],
)
async def test_prepare_rejects_bad_input(
    tools: dict[str, ParleyTool], args: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ToolInputError, match=fragment):
        await prepare(tools, **args)


async def test_bad_slug_message_says_what_is_wrong(tools: dict[str, ParleyTool]) -> None:
    with pytest.raises(ToolInputError) as raised:
        await prepare(tools, branch_slug="feat x!")
    assert "' '" in raised.value.message and "'!'" in raised.value.message


async def test_prepare_refuses_unknown_alias(tools: dict[str, ParleyTool]) -> None:
    with pytest.raises(ToolPermissionError, match="'mobile'"):
        await prepare(tools, repo_alias="mobile")


async def test_prepare_refuses_branch_made_outside_parley(
    tools: dict[str, ParleyTool], registry: Path
) -> None:
    git(registry.parent / "repos" / "web", "branch", "feat/x", "main")
    with pytest.raises(ToolInputError, match="already exists"):
        await prepare(tools)


async def test_push_after_prepare(tools: dict[str, ParleyTool], registry: Path) -> None:
    prepared = await prepare(tools)
    result = await call(tools, "git_push_branch", project="demo", repo_alias="web", branch="feat/x")
    assert result == {
        "project": "demo",
        "repo_alias": "web",
        "branch": "feat/x",
        "remote": "origin",
        "commit": prepared["commit"],
        "previous": None,  # not on the remote before: the push created it
        "pushed": True,
    }
    bare = registry.parent / "remotes" / "web.git"
    assert git(bare, f"--git-dir={bare}", "rev-parse", "refs/heads/feat/x") == prepared["commit"]
    worktree = Path(prepared["worktree"])
    assert git(worktree, "rev-parse", "--abbrev-ref", "feat/x@{upstream}") == "origin/feat/x"


@pytest.mark.parametrize("branch", ["main", "release/1.0", "MAIN"])
async def test_push_refuses_protected_branch(tools: dict[str, ParleyTool], branch: str) -> None:
    with pytest.raises(ToolPermissionError, match="protected"):
        await call(tools, "git_push_branch", project="demo", repo_alias="web", branch=branch)


async def test_push_refuses_unknown_alias(tools: dict[str, ParleyTool]) -> None:
    await prepare(tools)
    with pytest.raises(ToolPermissionError, match="not registered"):
        await call(tools, "git_push_branch", project="demo", repo_alias="mobile", branch="feat/x")


async def test_push_refuses_unprepared_branch(tools: dict[str, ParleyTool], registry: Path) -> None:
    # The branch exists, but git_prepare_worktree never made a worktree for it.
    git(registry.parent / "repos" / "web", "branch", "feat/y", "main")
    for branch in ("feat/y", "feat/never"):
        with pytest.raises(ToolPermissionError, match="not prepared"):
            await call(tools, "git_push_branch", project="demo", repo_alias="web", branch=branch)
    # A worktree prepared for "web" does not let "api" push a branch of the same name.
    await prepare(tools)
    with pytest.raises(ToolPermissionError, match="not prepared"):
        await call(tools, "git_push_branch", project="demo", repo_alias="api", branch="feat/x")


async def test_push_unknown_project_is_input_error(tools: dict[str, ParleyTool]) -> None:
    with pytest.raises(ToolInputError, match="known projects: demo"):
        await call(tools, "git_push_branch", project="nope", repo_alias="web", branch="feat/x")


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"projects": {"demo": {"repositories": [{"alias": "web"}]}}}),
        json.dumps({"projects": {"../evil": {"repositories": []}}}),
        json.dumps({"projects": {"d": {"repositories": [{"alias": "a", "path": "x"}] * 2}}}),
    ],
)
def test_malformed_registry_is_value_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "projects.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="not valid"):
        build_git_toolset(path)


def test_missing_registry_is_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not valid"):
        load_registry(tmp_path / "absent.json")


def test_toml_registry_and_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "projects.toml"
    path.parent.mkdir()
    path.write_text(
        '[[projects.demo.repositories]]\nalias = "web"\npath = "../repos/web"\n'
        'protected_branches = ["main"]\n'
    )
    repo = load_registry(path).projects["demo"].repositories[0]
    assert repo.path == (tmp_path / "repos" / "web").resolve()
    assert (repo.remote, repo.default_branch) == ("origin", "main")


def test_toolset_reads_environment(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PARLEY_GIT_PROJECTS", raising=False)
    with pytest.raises(ValueError, match="PARLEY_GIT_PROJECTS"):
        toolset(GitConfig.from_settings(Settings.from_env()))
    monkeypatch.setenv("PARLEY_GIT_PROJECTS", str(registry))
    monkeypatch.setenv("PARLEY_GIT_WORKTREES", str(tmp_path / "wt"))
    assert [t.name for t in toolset(GitConfig.from_settings(Settings.from_env()))] == [
        "git_list_project_repositories",
        "git_prepare_worktree",
        "git_push_branch",
        "git_remove_worktree",
        "git_delete_remote_branch",
    ]


async def test_worktrees_dir_from_environment(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_GIT_PROJECTS", str(registry))
    monkeypatch.setenv("PARLEY_GIT_WORKTREES", str(tmp_path / "wt"))
    result = await prepare(
        {t.name: t for t in toolset(GitConfig.from_settings(Settings.from_env()))}
    )
    assert Path(result["worktree"]) == (tmp_path / "wt" / "demo" / "web" / "feat-x").resolve()
