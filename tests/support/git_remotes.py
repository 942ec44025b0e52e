"""Helpers for tests of the git tools' previews and inverses: the demo projects (real
repositories and bare remotes in a temporary directory), the git toolset over them,
commits in a worktree, and a second clone that pushes behind Parley's back. Client
side: plain git subprocesses, no mocks. A pytest plugin, registered in tests/conftest.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from parley.activities.toolsets.git import build_git_toolset, create_demo_projects
from parley.contracts import ToolContext
from parley.tools import CONTEXT_ARG, ToolRegistry

CONTEXT = ToolContext(user_id="u1", session_id="s", workflow_id="conversation-s", tool_call_id="c1")
IDENTITY = ("-c", "user.name=Someone", "-c", "user.email=someone@example.com")
PREPARE = {"project": "demo", "repo_alias": "web", "branch_kind": "feat", "branch_slug": "x"}
PUSH = {"project": "demo", "repo_alias": "web", "branch": "feat/x"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """The demo projects' data directory: repos/web, repos/api, remotes/*.git."""
    create_demo_projects(tmp_path / "data")
    return tmp_path / "data"


@pytest.fixture
def git_tools(demo: Path) -> ToolRegistry:
    """The git toolset over the demo projects."""
    return ToolRegistry(build_git_toolset(demo / "projects.json"))


def bare(demo: Path, alias: str = "web") -> Path:
    return demo / "remotes" / f"{alias}.git"


def remote_commit(demo: Path, branch: str, alias: str = "web") -> str | None:
    """Where ``branch`` is on the bare remote, or None."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        cwd=bare(demo, alias),
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None


def commit_file(worktree: Path, name: str, text: str, message: str) -> str:
    """Write ``name`` in ``worktree``, commit it, return the new commit."""
    (worktree / name).write_text(text)
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-m", message)
    return git(worktree, "rev-parse", "HEAD")


def push_from_elsewhere(demo: Path, branch: str, where: Path, alias: str = "web") -> str:
    """Someone else clones the remote, commits on ``branch`` and pushes; the new commit."""
    git(demo, "clone", "-q", "--branch", branch, str(bare(demo, alias)), str(where))
    commit = commit_file(where, "theirs.txt", "someone else's work\n", "Someone else's commit")
    git(where, "push", "-q", "origin", branch)
    return commit


async def run(
    registry: ToolRegistry, name: str, args: dict[str, Any], context: ToolContext = CONTEXT
) -> Any:
    """Run a tool as ``run_tool`` does: canonical arguments and the injected context."""
    tool = registry.get(name)
    assert tool is not None
    return await tool.tool.ainvoke({**tool.canonical_args(args), CONTEXT_ARG: context})
