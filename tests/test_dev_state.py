"""What a running `parley dev` tells `parley tools` in another shell (parley.cli.dev_state):
found by its Temporal address and task queue, only while it runs, and never over what
the other shell's environment sets. No server: the file and the lock as dev writes them."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from parley.cli.dev_state import remove_state, running_dev, state_file, write_state
from parley.config.settings import Settings

PORT = 47233


@pytest.fixture
def dev_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runtime directory of the test's own, and a data dir locked by this process."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "dev.lock").write_text(f"{os.getpid()}\n")
    (data_dir / "plans-api-key").write_text("the-key\n")
    return data_dir


def dev_settings(data_dir: Path) -> Settings:
    return replace(
        Settings(),
        temporal_address=f"127.0.0.1:{PORT}",
        task_queue="dev-queue",
        tools="a:toolset,b:toolset",
        git_projects=str(data_dir / "projects.json"),
        policies_file="relative/policies.toml",
    )


def test_a_running_dev_fills_in_what_the_environment_does_not_set(dev_files: Path) -> None:
    path = write_state(PORT, dev_files, dev_settings(dev_files), dev_files / "plans-api-key")
    assert path == state_file(PORT) and path is not None
    assert path.stat().st_mode & 0o777 == 0o600
    assert "the-key" not in path.read_text()  # the key is named by its file, not copied

    other_shell = Settings(temporal_address=f"localhost:{PORT}", task_queue="dev-queue")
    found = running_dev(other_shell)
    assert found is not None and found.data_dir == str(dev_files)
    applied = found.apply_to(other_shell, {})
    assert applied.tools == "a:toolset,b:toolset"
    assert applied.git_projects == str(dev_files / "projects.json")
    assert applied.policies_file == str(Path("relative/policies.toml").resolve())
    assert applied.plans_api_key == "the-key"
    # What the other shell sets wins.
    mine = found.apply_to(other_shell, {"PARLEY_TOOLS": "mine:toolset"})
    assert mine.tools == other_shell.tools and mine.git_projects == applied.git_projects

    remove_state(path)
    assert not path.exists() and running_dev(other_shell) is None


def test_no_dev_is_found_elsewhere_or_once_it_has_stopped(dev_files: Path) -> None:
    path = write_state(PORT, dev_files, dev_settings(dev_files), None)
    assert path is not None
    here = Settings(temporal_address=f"127.0.0.1:{PORT}", task_queue="dev-queue")
    assert running_dev(here) is not None
    assert running_dev(replace(here, task_queue="another")) is None
    assert running_dev(replace(here, temporal_address=f"temporal.example:{PORT}")) is None
    assert running_dev(replace(here, temporal_address="127.0.0.1:7")) is None
    # A dev that was killed: its lock names no live process of its own.
    (dev_files / "dev.lock").write_text("999999999\n")
    assert running_dev(here) is None
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "pid": 999999999}))
    assert running_dev(here) is None
    path.write_text("{not json")
    assert running_dev(here) is None
