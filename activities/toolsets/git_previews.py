"""Previews and inverses of the git tools, and the two tools that undo them. Activity side.

The previews run in the ``preview_call`` activity, the inverse tools in ``run_tool``, on
the worker that holds the repositories; both read the same registry as the tools
(``git.build_git_toolset`` hands them its ``repo_of``, worktrees root and locks).

- ``git_prepare_worktree``'s preview: the branch and worktree it would create and the
  base commit it would start from (or that both exist already, as Parley made them: the
  call then changes nothing). Its inverse, ``git_remove_worktree``, removes that worktree
  and its local branch, only while the branch is still at the commit it was made at and
  the worktree has nothing uncommitted.
- ``git_push_branch``'s preview: the commits (sha, subject) and the diff stat it would
  send, against the remote branch if it exists, else against the base the branch was
  prepared from, and ``refused`` for a push the remote would reject (not a
  fast-forward). Its inverse, ``git_delete_remote_branch``, deletes a branch the push
  created, only while the remote branch is still at the pushed commit
  (``--force-with-lease``: the remote checks it, atomically).

A preview reads (``ls-remote``, ``log``, ``diff``) and changes nothing on the remote or
in a worktree. Input a call could not run with (an unknown alias, a protected branch)
is ``{"refused": ...}`` in the preview, as the run would refuse it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from langchain_core.tools import InjectedToolArg, tool

from parley.activities.toolsets.git_commands import (
    base_key,
    is_protected,
    normalize_branch,
    normalized,
    remote_head,
    resolve,
    run_git,
    worktrees_of,
)
from parley.contracts import InverseCall, ToolContext
from parley.contracts.errors import ToolInputError, ToolPermissionError
from parley.tools import ParleyTool, identifier

if TYPE_CHECKING:
    from parley.activities.toolsets.git import RepositoryConfig

RepoOf = Callable[[str, str], "RepositoryConfig"]

#: How many commits and files a push preview lists (it counts them all).
PREVIEW_COMMITS = 50
PREVIEW_FILES = 50
SHA_PATTERN = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")


def canonical_sha(value: str) -> str:
    """A full commit id, lower case; an abbreviation or a name is refused."""
    sha = value.strip().lower()
    if not SHA_PATTERN.fullmatch(sha):
        raise ToolInputError(f"expected_sha {value!r} is not a full commit id (40 hex digits)")
    return sha


def canonical_undo_args(args: dict[str, Any]) -> dict[str, Any]:
    """The branch an inverse call names, and the commit it must still be at."""
    return normalized(
        args,
        project=identifier,
        repo_alias=identifier,
        branch=normalize_branch,
        expected_sha=canonical_sha,
    )


# --- inverses (pure) -----------------------------------------------------------------


def inverse_of_prepare(args: dict[str, Any], payload: Any) -> InverseCall | None:
    """Remove the worktree a run created (None when it found it prepared already)."""
    if not isinstance(payload, dict) or payload.get("created") is not True:
        return None
    return InverseCall(
        name="git_remove_worktree",
        args={"project": payload["project"], "repo_alias": payload["repo_alias"],
              "branch": payload["branch"], "expected_sha": payload["commit"]},
    )  # fmt: skip


def inverse_of_push(args: dict[str, Any], payload: Any) -> InverseCall | None:
    """Delete the remote branch a run created (None when the branch was on the remote
    before: that push created nothing, and moving a branch back is not declared)."""
    if not isinstance(payload, dict) or "previous" not in payload or payload["previous"]:
        return None
    return InverseCall(
        name="git_delete_remote_branch",
        args={"project": payload["project"], "repo_alias": payload["repo_alias"],
              "branch": payload["branch"], "expected_sha": payload["commit"]},
    )  # fmt: skip


# --- reading git ---------------------------------------------------------------------


async def commits_between(repo: Path, since: str | None, until: str) -> dict[str, Any]:
    """The commits in ``until`` and not in ``since`` (sha, subject; newest first, the
    first ``PREVIEW_COMMITS``), their count and the diff stat from ``since``."""
    span = f"{since}..{until}" if since else until
    _, total = await run_git(repo, "rev-list", "--count", span)
    _, log = await run_git(repo, "log", f"-n{PREVIEW_COMMITS}", "--format=%H%x1f%s", span)
    commits = [dict(zip(("sha", "subject"), line.split("\x1f", 1), strict=True))
               for line in log.splitlines() if "\x1f" in line]  # fmt: skip
    if since is None:  # against nothing: every file of ``until`` is new
        _, since = await run_git(repo, "hash-object", "-t", "tree", "--stdin")
    _, numstat = await run_git(repo, "diff", "--numstat", since, until)
    files = []
    for line in numstat.splitlines():
        added, deleted, path = line.split("\t", 2)
        files.append({"path": path, "added": _count(added), "deleted": _count(deleted)})
    return {
        "commits": commits,
        "commits_total": int(total or 0),
        "diffstat": {
            "files_changed": len(files),
            "insertions": sum(f["added"] or 0 for f in files),
            "deletions": sum(f["deleted"] or 0 for f in files),
            "files": files[:PREVIEW_FILES],
        },
    }


def _count(text: str) -> int | None:
    return None if text == "-" else int(text)  # "-": a binary file


# --- the previews, the inverse tools -------------------------------------------------


class GitUndo:
    """The previews of ``git_prepare_worktree`` and ``git_push_branch`` and the tools
    that undo them, over the git toolset's registry, worktrees root and locks."""

    def __init__(self, repo_of: RepoOf, root: Path, locks: dict[Path, asyncio.Lock]) -> None:
        self.repo_of, self.root, self.locks = repo_of, root, locks

    def _lock(self, repo: RepositoryConfig) -> asyncio.Lock:
        return self.locks.setdefault(repo.path, asyncio.Lock())

    async def preview_prepare(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """What ``git_prepare_worktree`` would create, from its canonical arguments."""
        return await _refusing(self._preview_prepare(args))

    async def _preview_prepare(self, args: dict[str, Any]) -> dict[str, Any]:
        project = identifier(args["project"])
        repo = self.repo_of(args["project"], args["repo_alias"])
        kind, slug = args["branch_kind"], args["branch_slug"]
        branch = f"{kind}/{slug}"
        base = normalize_branch(args.get("base_branch") or repo.default_branch)
        target = self.root / project / repo.alias / f"{kind}-{slug}"
        data: dict[str, Any] = {"project": project, "repo_alias": repo.alias,
                                "branch": branch, "worktree": str(target)}  # fmt: skip
        async with self._lock(repo):
            existing = (await worktrees_of(repo.path)).get(branch)
            branch_commit = await resolve(repo.path, f"refs/heads/{branch}")
            data |= {"branch_exists": branch_commit is not None,
                     "worktree_exists": existing is not None}  # fmt: skip
            if existing == target:
                _, recorded = await run_git(repo.path, "config", base_key(branch), check=False)
                return data | {"base": recorded or base, "commit": branch_commit, "creates": False}
            if existing is not None or branch_commit is not None:
                return data | {
                    "base": base,
                    "refused": f"branch {branch!r} already exists in {repo.alias!r} outside "
                    "Parley's worktrees",
                }
            base_sha = await resolve(repo.path, base)
            if base_sha is None:
                return data | {
                    "base": base,
                    "refused": f"base branch {base!r} does not exist in {repo.alias!r}",
                }
            _, subject = await run_git(repo.path, "log", "-1", "--format=%s", base_sha)
        return data | {"base": base, "base_commit": base_sha, "base_subject": subject,
                       "commit": base_sha, "creates": True}  # fmt: skip

    async def preview_push(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """What ``git_push_branch`` would send, from its canonical arguments."""
        return await _refusing(self._preview_push(args))

    async def _preview_push(self, args: dict[str, Any]) -> dict[str, Any]:
        project = identifier(args["project"])
        repo = self.repo_of(args["project"], args["repo_alias"])
        name = normalize_branch(args["branch"])
        data: dict[str, Any] = {"project": project, "repo_alias": repo.alias,
                                "branch": name, "remote": repo.remote}  # fmt: skip
        if is_protected(name, repo.protected_branches):
            return data | {"refused": f"branch {name!r} of {repo.alias!r} is protected"}
        async with self._lock(repo):
            worktree = (await worktrees_of(repo.path)).get(name)
            if worktree is None or worktree.parent != self.root / project / repo.alias:
                return data | {
                    "refused": f"branch {name!r} of {repo.alias!r} was not prepared with "
                    "git_prepare_worktree"
                }
            commit = await resolve(repo.path, f"refs/heads/{name}")
            remote_commit = await remote_head(repo.path, repo.remote, name)
            data |= {"commit": commit, "remote_commit": remote_commit}
            if remote_commit == commit:
                return (
                    data
                    | {"up_to_date": True}
                    | await commits_between(repo.path, commit, str(commit))
                )
            if remote_commit is not None:
                known = await resolve(repo.path, remote_commit)
                code = 1
                if known is not None:
                    code, _ = await run_git(
                        repo.path, "merge-base", "--is-ancestor", remote_commit, str(commit),
                        check=False,
                    )  # fmt: skip
                if code != 0:
                    return data | {
                        "refused": f"not a fast-forward: {repo.remote}/{name} is at "
                        f"{remote_commit[:12]}, which {name} ({str(commit)[:12]}) does not "
                        "contain (someone else pushed to it); the remote would reject the push"
                    }
                since, against = remote_commit, f"{repo.remote}/{name}"
            else:
                _, recorded = await run_git(repo.path, "config", base_key(name), check=False)
                against = recorded or repo.default_branch
                base_sha = await resolve(repo.path, against)
                since = None
                if base_sha is not None:
                    _, since = await run_git(repo.path, "merge-base", base_sha, str(commit))
            changes = await commits_between(repo.path, since or None, str(commit))
        return data | {"against": against, "since": since or None} | changes

    def tools(self) -> list[ParleyTool]:
        """``git_remove_worktree`` and ``git_delete_remote_branch`` (policy confirm)."""
        return [
            ParleyTool(self._remove_worktree_tool(), "confirm", prepare=canonical_undo_args,
                       preview=self.preview_remove),
            ParleyTool(self._delete_remote_branch_tool(), "confirm", prepare=canonical_undo_args,
                       preview=self.preview_delete),
        ]  # fmt: skip

    def _remove_worktree_tool(self) -> Any:
        undo = self

        @tool(parse_docstring=True)
        async def git_remove_worktree(
            project: str,
            repo_alias: str,
            branch: str,
            expected_sha: str,
            context: Annotated[ToolContext, InjectedToolArg],
        ) -> dict[str, Any]:
            """Remove a worktree made by git_prepare_worktree and its local branch, only
            if the branch is still at expected_sha and nothing in it is uncommitted.

            Args:
                project: The project name.
                repo_alias: The repository alias.
                branch: The branch, e.g. "feat/x".
                expected_sha: The full commit the branch must still be at.
            """
            return await undo.remove_worktree(project, repo_alias, branch, expected_sha)

        return git_remove_worktree

    def _delete_remote_branch_tool(self) -> Any:
        undo = self

        @tool(parse_docstring=True)
        async def git_delete_remote_branch(
            project: str,
            repo_alias: str,
            branch: str,
            expected_sha: str,
            context: Annotated[ToolContext, InjectedToolArg],
        ) -> dict[str, Any]:
            """Delete a branch from the repository's remote, only if it is still at
            expected_sha there (no one pushed to it since). Protected branches never.

            Args:
                project: The project name.
                repo_alias: The repository alias.
                branch: The branch, e.g. "feat/x".
                expected_sha: The full commit the remote branch must still be at.
            """
            return await undo.delete_remote_branch(project, repo_alias, branch, expected_sha)

        return git_delete_remote_branch

    async def _where(
        self, project: str, alias: str, branch: str, expected: str
    ) -> tuple[dict[str, Any], RepositoryConfig, str, str]:
        project, repo = identifier(project), self.repo_of(project, alias)
        name, expected = normalize_branch(branch), canonical_sha(expected)
        if is_protected(name, repo.protected_branches):
            raise ToolPermissionError(f"branch {name!r} of {repo.alias!r} is protected")
        data = {"project": project, "repo_alias": repo.alias, "branch": name,
                "expected_sha": expected}  # fmt: skip
        return data, repo, name, expected

    async def _worktree_state(
        self, repo: RepositoryConfig, project: str, name: str, expected: str
    ) -> tuple[Path | None, str | None, str | None]:
        """The branch's worktree and commit, and why removing them is refused (None:
        it may go). Both absent: nothing to remove."""
        worktree = (await worktrees_of(repo.path)).get(name)
        commit = await resolve(repo.path, f"refs/heads/{name}")
        if worktree is None and commit is None:
            return None, None, None
        if worktree is None or worktree.parent != self.root / project / repo.alias:
            return worktree, commit, (
                f"branch {name!r} of {repo.alias!r} has no worktree made by "
                "git_prepare_worktree; not removed"
            )  # fmt: skip
        if commit != expected:
            return worktree, commit, (
                f"branch {name!r} is at {str(commit)[:12]}, not {expected[:12]} as prepared: "
                "it has moved on; not removed"
            )  # fmt: skip
        _, dirty = await run_git(worktree, "status", "--porcelain")
        if dirty:
            return worktree, commit, (
                f"the worktree of {name!r} has uncommitted changes; not removed"
            )  # fmt: skip
        return worktree, commit, None

    async def preview_remove(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        async def compute() -> dict[str, Any]:
            data, repo, name, expected = await self._where(
                args["project"], args["repo_alias"], args["branch"], args["expected_sha"]
            )
            async with self._lock(repo):
                worktree, commit, refused = await self._worktree_state(
                    repo, data["project"], name, expected
                )
            data |= {"worktree": str(worktree) if worktree else None, "commit": commit}
            return data | ({"refused": refused} if refused else {"removes": commit is not None})

        return await _refusing(compute())

    async def remove_worktree(
        self, project: str, alias: str, branch: str, expected: str
    ) -> dict[str, Any]:
        data, repo, name, expected = await self._where(project, alias, branch, expected)
        async with self._lock(repo):
            worktree, _, refused = await self._worktree_state(repo, data["project"], name, expected)
            if refused:
                raise ToolPermissionError(refused)
            if worktree is None:  # already gone (a retried call)
                return data | {"removed": False, "absent": True}
            await run_git(repo.path, "worktree", "remove", str(worktree))
            # Deleted only if still at the expected commit (git compares and deletes).
            await run_git(repo.path, "update-ref", "-d", f"refs/heads/{name}", expected)
            await run_git(repo.path, "config", "--unset", base_key(name), check=False)
        return data | {"worktree": str(worktree), "removed": True}

    async def preview_delete(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        async def compute() -> dict[str, Any]:
            data, repo, name, expected = await self._where(
                args["project"], args["repo_alias"], args["branch"], args["expected_sha"]
            )
            remote_commit = await remote_head(repo.path, repo.remote, name)
            data |= {"remote": repo.remote, "remote_commit": remote_commit}
            if remote_commit not in (None, expected):
                return data | {"refused": _moved(repo.remote, name, remote_commit, expected)}
            return data | {"deletes": remote_commit is not None}

        return await _refusing(compute())

    async def delete_remote_branch(
        self, project: str, alias: str, branch: str, expected: str
    ) -> dict[str, Any]:
        data, repo, name, expected = await self._where(project, alias, branch, expected)
        data["remote"] = repo.remote
        async with self._lock(repo):
            remote_commit = await remote_head(repo.path, repo.remote, name)
            if remote_commit is None:  # already gone (a retried call, or someone else)
                return data | {"deleted": False, "absent": True}
            if remote_commit != expected:
                raise ToolPermissionError(_moved(repo.remote, name, remote_commit, expected))
            lease = f"--force-with-lease=refs/heads/{name}:{expected}"
            code, _ = await run_git(
                repo.path, "push", "--porcelain", lease, repo.remote, f":refs/heads/{name}",
                check=False,
            )  # fmt: skip
            if code != 0:  # the remote moved between our look and the push
                now = await remote_head(repo.path, repo.remote, name)
                raise ToolPermissionError(_moved(repo.remote, name, str(now), expected))
        return data | {"deleted": True}


def _moved(remote: str, name: str, now: str, expected: str) -> str:
    return (
        f"{remote}/{name} is at {now[:12]}, not the pushed {expected[:12]}: someone pushed "
        "to it since; not deleted"
    )


async def _refusing(computed: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """A preview's data; input the call could not run with is a refusal, as the run
    would refuse it (a git command failing is left to fail the preview)."""
    try:
        return await computed
    except (ToolInputError, ToolPermissionError) as err:
        return {"refused": err.message}
