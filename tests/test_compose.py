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


#: The secrets compose has no default for.
SECRETS = {"PARLEY_PLANS_API_KEY": "k" * 20, "MINIO_ROOT_PASSWORD": "m" * 20}


def test_docker_compose_config_validates_it() -> None:
    checked = compose("config", "-q", **SECRETS)
    assert checked.returncode == 0, checked.stderr
    services = compose("config", "--services", **SECRETS).stdout.split()
    assert set(services) == {
        "postgresql",
        "temporal",
        "temporal-setup",
        "temporal-ui",
        "minio",
        "minio-setup",
        "worker",
        "gateway",
        "plans",
    }
    # the secrets have no default: compose says which variable is missing
    for name in SECRETS:
        missing = compose("config", "-q", **{k: v for k, v in SECRETS.items() if k != name})
        assert missing.returncode != 0
        assert name in missing.stderr


def test_every_worker_and_gateway_uses_the_bucket_the_setup_job_creates() -> None:
    """Several worker hosts share no volume: the payload store is MinIO's bucket."""
    spec = yaml.safe_load(compose("config", **SECRETS).stdout)
    setup = " ".join(spec["services"]["minio-setup"]["command"])
    assert "mc mb --ignore-existing" in setup
    bucket = spec["services"]["minio-setup"]["environment"]["PARLEY_S3_BUCKET"]
    for name in ("worker", "gateway"):
        service = spec["services"][name]
        environment = service["environment"]
        assert environment["PARLEY_PAYLOAD_STORE"] == f"s3://{bucket}"
        assert environment["AWS_ENDPOINT_URL"] == "http://minio:9000"
        assert environment["AWS_SECRET_ACCESS_KEY"] == SECRETS["MINIO_ROOT_PASSWORD"]
        assert service["depends_on"]["minio-setup"]["condition"] == (
            "service_completed_successfully"
        )
        assert not service.get("volumes"), f"{name} needs no shared volume"
    assert spec["services"]["worker"]["environment"]["PARLEY_STORE_GC_EVERY_SECONDS"]


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
