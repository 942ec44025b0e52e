"""The git toolset: list a project's repositories, prepare a branch worktree, push it.

Activity side of the Temporal boundary: these tools run inside the ``run_tool`` activity
on the worker, which alone holds the repositories. A project registry file (JSON, or
TOML for a ``.toml`` suffix) says which repositories a project has::

    {"projects": {"demo": {"repositories": [{"alias": "web", "path": "repos/web",
      "remote": "origin", "default_branch": "main", "protected_branches": ["main"]}]}}}

Errors follow design.md: input the model can fix (bad slug, unknown project) is a
``ToolInputError``; refusals (unknown alias, protected or unprepared branch) are a
``ToolPermissionError``; a git command failing unexpectedly is a ``GitCommandError``
(``git_commands``, where git runs as a subprocess so the worker's event loop never
blocks), deliberately not a ``ParleyError``, so the turn fails closed.

``git_prepare_worktree`` and ``git_push_branch`` declare a preview and an inverse
(``git_previews``: the base and branch a worktree would start from, the commits and
diff stat a push would send; ``git_remove_worktree`` and ``git_delete_remote_branch``).
The registry, the slug rules and the tools belong together; ``create_demo_projects``
(the demo ``parley dev`` sets up) is the only part that could leave.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import InjectedToolArg, tool
from pydantic import BaseModel, Field, StringConstraints, ValidationError, field_validator

from parley.activities.toolsets.git_commands import (
    GIT_ENV,
    base_key,
    is_protected,
    normalize_branch,
    normalized,
    remote_head,
    resolve,
    run_git,
    worktrees_of,
)
from parley.activities.toolsets.git_previews import GitUndo, inverse_of_prepare, inverse_of_push
from parley.contracts import ToolContext
from parley.contracts.errors import ToolInputError, ToolPermissionError
from parley.tools import ParleyTool, identifier
from parley.tools.loading import GitConfig, factory

BRANCH_KINDS = ("feat", "fix", "chore", "docs", "refactor", "test")
SLUG_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SLUG_MAX = 48
# Project names and aliases become path segments under the worktrees dir.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")

# --- registry ---------------------------------------------------------------------


class RepositoryConfig(BaseModel):
    alias: str = Field(pattern=NAME_PATTERN.pattern)
    path: Path
    remote: str = "origin"
    default_branch: str = "main"
    protected_branches: list[str] = Field(default_factory=list)


class ProjectConfig(BaseModel):
    repositories: list[RepositoryConfig]

    @field_validator("repositories")
    @classmethod
    def _unique(cls, repos: list[RepositoryConfig]) -> list[RepositoryConfig]:
        aliases = [r.alias for r in repos]
        if len(set(aliases)) != len(aliases):
            raise ValueError(f"repository aliases must be unique, got {aliases}")
        return repos

    def repository(self, alias: str) -> RepositoryConfig | None:
        return next((r for r in self.repositories if r.alias == alias), None)


class ProjectRegistry(BaseModel):
    projects: dict[Annotated[str, StringConstraints(pattern=NAME_PATTERN.pattern)], ProjectConfig]


def load_registry(path: Path) -> ProjectRegistry:
    """Read and validate a registry file; relative repository paths resolve against its
    folder. Worker configuration, so anything wrong is a ``ValueError`` here, at load."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        registry = ProjectRegistry.model_validate(data)
    except (OSError, ValueError, ValidationError) as err:
        raise ValueError(f"git project registry {path} is not valid: {err}") from err
    for project in registry.projects.values():
        for repo in project.repositories:
            repo.path = (path.parent / repo.path.expanduser()).resolve()
    return registry


# --- validation -------------------------------------------------------------------


def normalize_kind(kind: str) -> str:
    value = identifier(kind).lower()
    if value not in BRANCH_KINDS:
        raise ToolInputError(
            f"branch_kind {kind!r} is not valid: use one of {', '.join(BRANCH_KINDS)}"
        )
    return value


def normalize_slug(slug: str) -> str:
    """Lower-case first (F11: ``PJ1-project-git-extend`` is fine), then validate."""
    value = identifier(slug).lower()
    if SLUG_PATTERN.match(value) and len(value) <= SLUG_MAX:
        return value
    bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c == "-"))})
    if not value:
        problem = "it is empty"
    elif len(value) > SLUG_MAX:
        problem = f"it has {len(value)} characters"
    elif bad:
        problem = f"it contains {', '.join(repr(c) for c in bad)}"
    else:
        problem = "it starts or ends with a hyphen, or has two hyphens in a row"
    raise ToolInputError(
        f"branch_slug {slug!r} is not valid ({problem}): use lower-case ASCII kebab-case, "
        f"letters and digits in words joined by single hyphens, 1-{SLUG_MAX} characters, "
        "e.g. 'pj1-project-git-extend'"
    )


def canonical_list_args(args: dict[str, Any]) -> dict[str, Any]:
    return normalized(args, project=identifier)


def canonical_prepare_args(args: dict[str, Any]) -> dict[str, Any]:
    """The worktree a call will prepare, as the rules and the user see it: the kind
    and slug validated (a bad slug is the model's to fix before anyone is asked)."""
    return normalized(
        args,
        project=identifier,
        repo_alias=identifier,
        branch_kind=normalize_kind,
        branch_slug=normalize_slug,
        base_branch=normalize_branch,
    )


def canonical_push_args(args: dict[str, Any]) -> dict[str, Any]:
    """The branch a call will push, as the rules and the user see it."""
    return normalized(args, project=identifier, repo_alias=identifier, branch=normalize_branch)


# --- tools ------------------------------------------------------------------------


def build_git_toolset(registry_path: Path, worktrees_dir: Path | None = None) -> list[ParleyTool]:
    """The git tools over the registry at ``registry_path`` (the three the model works
    with, and the two that undo them: ``git_previews``); worktrees are created under
    ``worktrees_dir`` (default: ``worktrees`` next to the registry)."""
    registry_path = Path(registry_path).resolve()
    registry = load_registry(registry_path)  # fail at worker start, not at first call
    root = Path(worktrees_dir or registry_path.parent / "worktrees").resolve()
    # Activities share one event loop: serialize git writes per repository.
    locks: dict[Path, asyncio.Lock] = {}

    def project_of(name: str) -> ProjectConfig:
        project = registry.projects.get(identifier(name))
        if project is None:
            known = ", ".join(sorted(registry.projects)) or "none"
            raise ToolInputError(f"unknown project {name!r}; known projects: {known}")
        return project

    def repo_of(project: str, alias: str) -> RepositoryConfig:
        repo = project_of(project).repository(identifier(alias))
        if repo is None:
            raise ToolPermissionError(
                f"repository {alias!r} is not registered in project {identifier(project)!r}"
            )
        return repo

    @tool(parse_docstring=True)
    async def git_list_project_repositories(
        project: str, context: Annotated[ToolContext, InjectedToolArg]
    ) -> dict[str, Any]:
        """List the git repositories of a project: alias, path, remote, default and
        protected branches. Use an alias from here in the other git tools.

        Args:
            project: The project name, e.g. "demo".
        """
        repos = [r.model_dump(mode="json") for r in project_of(project).repositories]
        return {"project": identifier(project), "repositories": repos}

    @tool(parse_docstring=True)
    async def git_prepare_worktree(
        project: str,
        repo_alias: str,
        branch_kind: str,
        branch_slug: str,
        context: Annotated[ToolContext, InjectedToolArg],
        base_branch: str | None = None,
    ) -> dict[str, Any]:
        """Create a new branch `<branch_kind>/<branch_slug>` in its own git worktree,
        starting from base_branch (the repository's default branch if omitted).
        Calling it again for the same branch returns the existing worktree.

        Args:
            project: The project name.
            repo_alias: The repository alias, from git_list_project_repositories.
            branch_kind: One of feat, fix, chore, docs, refactor, test.
            branch_slug: Short lower-case kebab-case name, e.g. "add-login-page".
            base_branch: Branch to start from; defaults to the default branch.
        """
        # Idempotent on the canonical arguments run_tool gives (canonical_prepare_args).
        kind, slug = normalize_kind(branch_kind), normalize_slug(branch_slug)
        project, repo = identifier(project), repo_of(project, repo_alias)
        branch, base = f"{kind}/{slug}", normalize_branch(base_branch or repo.default_branch)
        target = root / project / repo.alias / f"{kind}-{slug}"
        async with locks.setdefault(repo.path, asyncio.Lock()):
            existing = (await worktrees_of(repo.path)).get(branch)
            if existing == target:
                # Already prepared (a retried activity, or the model asking twice).
                _, recorded = await run_git(repo.path, "config", base_key(branch), check=False)
                base = recorded or base
            elif existing is not None or await resolve(repo.path, f"refs/heads/{branch}"):
                raise ToolInputError(
                    f"branch {branch!r} already exists in {repo.alias!r} outside Parley's "
                    "worktrees; choose another branch_slug"
                )
            else:
                base_sha = await resolve(repo.path, base)
                if base_sha is None:
                    raise ToolInputError(f"base branch {base!r} does not exist in {repo.alias!r}")
                target.parent.mkdir(parents=True, exist_ok=True)
                add = ("worktree", "add", "--no-track", "-b", branch, str(target), base_sha)
                await run_git(repo.path, *add)
                # Remembered so that a repeated call can report the base it was made from.
                await run_git(repo.path, "config", base_key(branch), base)
            commit = await resolve(repo.path, f"refs/heads/{branch}")
        return {"project": project, "repo_alias": repo.alias, "branch": branch,
                "worktree": str(target), "base": base, "commit": commit,
                "created": existing is None}  # fmt: skip

    @tool(parse_docstring=True)
    async def git_push_branch(
        project: str,
        repo_alias: str,
        branch: str,
        context: Annotated[ToolContext, InjectedToolArg],
    ) -> dict[str, Any]:
        """Push a branch prepared with git_prepare_worktree to the repository's remote
        and set its upstream. Protected branches (e.g. main) cannot be pushed.

        Args:
            project: The project name.
            repo_alias: The repository alias.
            branch: The full branch name returned by git_prepare_worktree, e.g. "feat/x".
        """
        # Idempotent on the canonical arguments run_tool gives (canonical_push_args).
        project, repo = identifier(project), repo_of(project, repo_alias)
        name = normalize_branch(branch)
        if is_protected(name, repo.protected_branches):
            raise ToolPermissionError(f"branch {name!r} of {repo.alias!r} is protected")
        async with locks.setdefault(repo.path, asyncio.Lock()):
            worktree = (await worktrees_of(repo.path)).get(name)
            # Only branches this toolset prepared may leave the machine.
            if worktree is None or worktree.parent != root / project / repo.alias:
                raise ToolPermissionError(
                    f"branch {name!r} of {repo.alias!r} was not prepared with "
                    "git_prepare_worktree; prepare it first"
                )
            commit = await resolve(repo.path, f"refs/heads/{name}")
            # Where the remote branch was (None: the push creates it), for its inverse.
            previous = await remote_head(repo.path, repo.remote, name)
            await run_git(worktree, "push", "--set-upstream", repo.remote, f"{name}:{name}")
        return {"project": project, "repo_alias": repo.alias, "branch": name,
                "remote": repo.remote, "commit": commit, "previous": previous,
                "pushed": True}  # fmt: skip

    undo = GitUndo(repo_of, root, locks)
    return [
        ParleyTool(git_list_project_repositories, "auto", prepare=canonical_list_args),
        ParleyTool(git_prepare_worktree, "confirm", prepare=canonical_prepare_args,
                   preview=undo.preview_prepare, compensate=inverse_of_prepare),
        ParleyTool(git_push_branch, "confirm", prepare=canonical_push_args,
                   preview=undo.preview_push, compensate=inverse_of_push),
        *undo.tools(),
    ]  # fmt: skip


@factory(GitConfig)
def toolset(config: GitConfig) -> list[ParleyTool]:
    """The toolset for ``PARLEY_TOOLS=parley.activities.toolsets.git:toolset``, from its
    own config (``PARLEY_GIT_PROJECTS``, ``PARLEY_GIT_WORKTREES``)."""
    if config.projects is None:
        raise ValueError(
            "PARLEY_GIT_PROJECTS is not set: point it at a git project registry file "
            "(e.g. the projects.json that `parley dev` writes)"
        )
    return build_git_toolset(config.projects, config.worktrees)


# --- demo -------------------------------------------------------------------------


def create_demo_projects(data_dir: Path) -> Path:
    """Create (idempotently) project "demo" with repositories "web" and "api" under
    ``data_dir``, each with a commit on main and a bare ``origin`` under ``remotes/``;
    write and return ``data_dir/projects.json``. Synchronous: used by the CLI and tests."""
    data_dir = Path(data_dir).resolve()
    identity = ["-c", "user.name=Parley", "-c", "user.email=parley@localhost"]

    def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["git", *identity, *args]
        env = {**os.environ, **GIT_ENV}
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, check=check
        )

    def has_main(cwd: Path) -> bool:
        main = git(cwd, "rev-parse", "--verify", "--quiet", "refs/heads/main", check=False)
        return main.returncode == 0

    aliases = ("web", "api")
    for alias in aliases:
        repo, bare = data_dir / "repos" / alias, data_dir / "remotes" / f"{alias}.git"
        if not (bare / "HEAD").exists():
            bare.mkdir(parents=True, exist_ok=True)
            git(bare, "init", "--bare", "--initial-branch=main")
        if not (repo / ".git").exists():
            repo.mkdir(parents=True, exist_ok=True)
            git(repo, "init", "--initial-branch=main")
        if not has_main(repo):
            (repo / "README.md").write_text(f"# {alias}\n\nDemo repository for Parley.\n")
            git(repo, "add", "README.md")
            git(repo, "commit", "-m", f"Initial commit of {alias}")
        if "origin" not in git(repo, "remote").stdout.split():
            git(repo, "remote", "add", "origin", str(bare))
        if not has_main(bare):
            git(repo, "push", "--quiet", "origin", "main:main")
    repositories = [
        {"alias": alias, "path": f"repos/{alias}", "remote": "origin", "default_branch": "main",
         "protected_branches": ["main", "release/*"]}
        for alias in aliases
    ]  # fmt: skip
    registry = data_dir / "projects.json"
    registry.write_text(
        json.dumps({"projects": {"demo": {"repositories": repositories}}}, indent=2) + "\n"
    )
    return registry
