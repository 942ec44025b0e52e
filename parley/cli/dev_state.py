"""What a running ``parley dev`` tells the commands of other shells about its worker.

Client side. The conversation commands find ``parley dev`` by its Temporal address alone
(the default one, or the ``export TEMPORAL_ADDRESS=…`` line it prints). ``parley tools``
needs more: the worker's tool settings, which ``parley dev`` picks itself (its demo
registry, both toolsets, its own plans service and key). So while it runs, ``parley dev``
keeps them in a small file named after its Temporal port, in the user's runtime
directory, and removes it when it stops; ``parley tools`` reads the file of the address
it would talk to, for the settings its own environment does not set.

The file names no secret: the plans service's key is named by its file (0600, in the
data directory), never copied.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from parley.config.settings import Settings

#: The worker settings ``parley tools`` takes from a running ``parley dev``, each with
#: the environment variable that, when set, wins over it.
SHARED_SETTINGS = {
    "tools": "PARLEY_TOOLS",
    "git_projects": "PARLEY_GIT_PROJECTS",
    "git_worktrees": "PARLEY_GIT_WORKTREES",
    "policies_file": "PARLEY_POLICIES",
    "mcp_servers": "PARLEY_MCP_SERVERS",
    "plans_url": "PARLEY_PLANS_URL",
}
#: Settings that are paths: kept absolute, so that another shell's directory does not
#: change what they name.
PATH_SETTINGS = ("git_projects", "git_worktrees", "policies_file", "mcp_servers")
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"})


@dataclass(frozen=True)
class DevWorker:
    """A running ``parley dev`` and its worker's tool settings."""

    pid: int
    data_dir: str
    namespace: str
    task_queue: str
    settings: dict[str, str | None]
    plans_api_key_file: str | None

    def apply_to(self, settings: Settings, environ: Mapping[str, str]) -> Settings:
        """``settings`` with this worker's tool settings wherever ``environ`` sets none."""
        changes: dict[str, Any] = {
            name: value
            for name, value in self.settings.items()
            if name in SHARED_SETTINGS and SHARED_SETTINGS[name] not in environ
        }
        if (
            "PARLEY_PLANS_API_KEY" not in environ
            and "PARLEY_PLANS_URL" not in environ
            and self.plans_api_key_file
        ):
            with contextlib.suppress(OSError):
                changes["plans_api_key"] = Path(self.plans_api_key_file).read_text().strip()
        return replace(settings, **changes)


def state_file(port: int) -> Path:
    """Where the ``parley dev`` of Temporal port ``port`` keeps its worker's settings:
    the user's runtime directory (``XDG_RUNTIME_DIR``), else ``~/.cache/parley``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    base = Path(runtime) / "parley" if runtime else Path.home() / ".cache" / "parley"
    return base / f"dev-{port}.json"


def write_state(
    port: int, data_dir: Path, settings: Settings, plans_api_key_file: Path | None
) -> Path | None:
    """Record this process's ``parley dev`` (port, data dir, worker settings); returns the
    file, for ``remove_state``, or None if it cannot be written (``parley dev`` runs on;
    only ``parley tools`` elsewhere will not find it). Written whole (a reader never sees
    half of it), 0600."""
    shared: dict[str, str | None] = {}
    for name in SHARED_SETTINGS:
        value = getattr(settings, name)
        if value and name in PATH_SETTINGS:
            value = str(Path(value).resolve())
        shared[name] = value
    state = {
        "pid": os.getpid(),
        "data_dir": str(data_dir),
        "namespace": settings.namespace,
        "task_queue": settings.task_queue,
        "settings": shared,
        "plans_api_key_file": str(plans_api_key_file) if plans_api_key_file else None,
    }
    path = state_file(port)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(state, out)
        os.replace(partial, path)
    except OSError:
        return None
    return path


def remove_state(path: Path | None) -> None:
    """Remove ``path`` if it is still this process's (a later ``parley dev`` on the same
    port may have replaced it)."""
    if path is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def running_dev(settings: Settings) -> DevWorker | None:
    """The ``parley dev`` serving ``settings``' Temporal address, namespace and task
    queue, if one runs on this machine; None otherwise (also for a file left by one
    that was killed: its process is gone, or no longer holds the data dir's lock)."""
    host, _, port = settings.temporal_address.rpartition(":")
    if host not in LOCAL_HOSTS or not port.isdigit():
        return None
    try:
        state = json.loads(state_file(int(port)).read_text())
        found = DevWorker(
            pid=int(state["pid"]),
            data_dir=str(state["data_dir"]),
            namespace=str(state["namespace"]),
            task_queue=str(state["task_queue"]),
            settings=dict(state["settings"]),
            plans_api_key_file=state.get("plans_api_key_file"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (found.namespace, found.task_queue) != (settings.namespace, settings.task_queue):
        return None
    return found if _holds_lock(found) else None


def _holds_lock(dev: DevWorker) -> bool:
    """Whether ``dev``'s process is alive and is the one its data dir's lock names."""
    try:
        os.kill(dev.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's: the lock file says whether it is that dev
    try:
        holder = (Path(dev.data_dir) / "dev.lock").read_text().strip()
    except OSError:
        return False
    return holder == str(dev.pid)
