"""docker-compose.yml stays valid and true to the code: Debian's ``docker-compose
config`` validates it (no engine needed), every variable it sets is one Parley reads,
and every command it runs is a real ``parley`` command with those options."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

import parley.settings
from tests.support.processes import ROOT

COMPOSE = ROOT / "docker-compose.yml"
PARLEY_SERVICES = ("worker", "gateway", "plans")


def compose(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **env},
        cwd=ROOT,
    )


def test_docker_compose_config_validates_it() -> None:
    checked = compose("config", "-q", PARLEY_PLANS_API_KEY="k" * 20)
    assert checked.returncode == 0, checked.stderr
    services = compose("config", "--services", PARLEY_PLANS_API_KEY="k" * 20).stdout.split()
    assert set(services) == {
        "postgresql",
        "temporal",
        "temporal-setup",
        "temporal-ui",
        "worker",
        "gateway",
        "plans",
    }
    # the plans key has no default: compose says which variable is missing
    missing = compose("config", "-q")
    assert missing.returncode != 0
    assert "PARLEY_PLANS_API_KEY" in missing.stderr


def test_compose_runs_two_workers_and_creates_the_search_attributes() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    assert spec["services"]["worker"]["deploy"]["replicas"] == 2
    setup = " ".join(spec["services"]["temporal-setup"]["command"])
    for attribute in (
        "ParleyUser:Keyword",
        "ParleyStatus:Keyword",
        "ParleyPendingTools:KeywordList",
        "ParleyReviewers:KeywordList",
    ):
        assert attribute in setup


def test_every_variable_compose_sets_is_read_by_parley() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    settings_source = Path(parley.settings.__file__).read_text()
    for name in PARLEY_SERVICES:
        for variable in spec["services"][name]["environment"]:
            assert f'"{variable}"' in settings_source, f"{name}: {variable} is not read"


def test_every_command_compose_runs_exists_with_its_options() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    for name in PARLEY_SERVICES:
        command = spec["services"][name]["command"]
        options = [arg for arg in command if arg.startswith("--")]
        help_text = subprocess.run(
            [sys.executable, "-m", "parley.cli", command[0], "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert help_text.returncode == 0, (name, help_text.stderr)
        for option in options:
            assert re.search(rf"{option}\b", help_text.stdout), (name, option)
