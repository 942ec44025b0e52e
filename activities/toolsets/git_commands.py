"""Git as the git tools run it: a subprocess that never blocks the event loop, the
worktree list, revisions, and the branch names the tools agree on. Activity side.

Shared by the git toolset (``git``) and its previews and inverse tools
(``git_previews``), which are both activity code run by ``run_tool`` and
``preview_call`` on the worker that holds the repositories.
"""

from __future__ import annotations

import asyncio
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from parley.tools import identifier

# No prompt can ever be answered on a worker; commits (if any) get a fixed identity.
GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Parley",
    "GIT_AUTHOR_EMAIL": "parley@localhost",
    "GIT_COMMITTER_NAME": "Parley",
    "GIT_COMMITTER_EMAIL": "parley@localhost",
}
GIT_TIMEOUT = 120.0


class GitCommandError(RuntimeError):
    """A git command failed unexpectedly: an infrastructure failure, not the model's."""

    def __init__(self, command: list[str], returncode: int | None, stderr: str) -> None:
        self.command, self.returncode, self.stderr = command, returncode, stderr
        super().__init__(f"{' '.join(command)} failed (exit {returncode}): {stderr.strip()}")


async def run_git(cwd: Path, *args: str, check: bool = True) -> tuple[int, str]:
    """Run git without blocking the loop; returns (exit code, stdout)."""
    command = ["git", *args]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT)
    except BaseException:
        # Timed out or the activity was cancelled: don't leave git running behind us.
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    if check and process.returncode != 0:
        raise GitCommandError(command, process.returncode, err.decode(errors="replace"))
    return process.returncode or 0, out.decode(errors="replace").strip()


async def worktrees_of(repo: Path) -> dict[str, Path]:
    """Branch name -> worktree path, from ``git worktree list`` (stale entries pruned)."""
    await run_git(repo, "worktree", "prune")
    _, out = await run_git(repo, "worktree", "list", "--porcelain")
    found: dict[str, Path] = {}
    for block in out.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines())
        if fields.get("branch", "").startswith("refs/heads/"):
            branch = fields["branch"].removeprefix("refs/heads/")
            found[branch] = Path(fields["worktree"])  # git reports real paths
    return found


async def resolve(repo: Path, rev: str) -> str | None:
    """The commit ``rev`` names, or None; a leading "-" would be read as an option."""
    if rev.startswith("-"):
        return None
    code, sha = await run_git(
        repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False
    )
    return sha if code == 0 else None


def base_key(branch: str) -> str:
    return f"branch.{branch}.parleybase"


def normalize_branch(branch: str) -> str:
    """A branch name as this toolset names branches: NFKC, no surrounding whitespace,
    no ``refs/heads/`` prefix (however often repeated), lower-case (every branch it
    prepares is ``<kind>/<slug>`` in lower case). Idempotent."""
    value = identifier(branch)
    while value.startswith("refs/heads/"):
        value = value.removeprefix("refs/heads/").strip()
    return value.lower()


def normalized(args: dict[str, Any], **normalizers: Any) -> dict[str, Any]:
    """``args`` with each named string argument passed through its normalizer."""
    return {
        key: normalizers[key](value) if key in normalizers and isinstance(value, str) else value
        for key, value in args.items()
    }


def is_protected(branch: str, patterns: list[str]) -> bool:
    """Whether ``branch`` (canonical: lower case) matches a protected pattern."""
    return any(fnmatchcase(branch, pattern.lower()) for pattern in patterns)


async def remote_head(repo: Path, remote: str, branch: str) -> str | None:
    """The commit ``branch`` is at on ``remote`` (asked of the remote), or None."""
    ref = f"refs/heads/{branch}"
    _, out = await run_git(repo, "ls-remote", "--heads", remote, ref)
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None
