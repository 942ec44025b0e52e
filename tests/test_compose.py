"""docker-compose.yml stays valid and true to the code: Debian's ``docker-compose
config`` validates it (no engine needed), every variable it sets is one Parley reads,
and every command it runs is a real ``parley`` command with those options."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

import parley.config.settings
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
        "ParleyEscalatedTo:KeywordList",
    ):
        assert attribute in setup


def configuration_source() -> str:
    """``parley/config/settings.py`` and the Parley modules it imports to read the environment
    with (the Temporal connection's part, for one)."""
    settings_file = Path(parley.config.settings.__file__)
    tree = ast.parse(settings_file.read_text())
    modules = [
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parley.")
    ]
    files = [settings_file, *(Path(str(importlib.import_module(m).__file__)) for m in modules)]
    return "".join(path.read_text() for path in files)


def test_every_variable_compose_sets_is_read_by_parley() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    settings_source = configuration_source()
    for name in PARLEY_SERVICES:
        for variable in spec["services"][name]["environment"]:
            # Read by name, or (TEMPORAL_*) through the SDK's environment configuration,
            # as the module that hands it the environment says.
            read = f'"{variable}"' in settings_source or (
                variable.startswith("TEMPORAL_") and f"``{variable}``" in settings_source
            )
            assert read, f"{name}: {variable} is not read"


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


#: Services that run until stopped (the setup jobs run once, and compose waits for them).
LONG_RUNNING = ("postgresql", "temporal", "temporal-ui", "minio", "worker", "gateway", "plans")


def seconds(duration: str) -> float:
    """A compose duration (``40s``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    found = re.findall(r"(\d+(?:\.\d+)?)([hms])", duration)
    assert found and "".join(n + u for n, u in found) == duration, duration
    return sum(float(number) * units[unit] for number, unit in found)


def test_every_long_running_service_has_a_healthcheck_its_dependents_wait_for() -> None:
    spec = yaml.safe_load(compose("config", **SECRETS).stdout)
    services = spec["services"]
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
    assert "pg_isready" in " ".join(services["postgresql"]["healthcheck"]["test"])
    assert services["temporal"]["healthcheck"]["test"][1:5] == [
        "temporal",
        "operator",
        "cluster",
        "health",
    ]
    # The gateway's: /healthz from the image's own Python (it has no curl).
    gateway_check = services["gateway"]["healthcheck"]["test"]
    assert gateway_check[:3] == ["CMD", "python", "-c"]
    assert "urllib.request.urlopen('http://127.0.0.1:8770/healthz'" in gateway_check[3]
    assert "127.0.0.1:8765/health'" in services["plans"]["healthcheck"]["test"][3]
    # The worker's: `parley worker --check` reads the heartbeat file its command writes.
    worker_command = services["worker"]["command"]
    health_file = worker_command[worker_command.index("--health-file") + 1]
    assert services["worker"]["healthcheck"]["test"] == [
        "CMD",
        "parley",
        "worker",
        "--check",
        "--health-file",
        health_file,
    ]
    assert health_file.startswith("/tmp/")  # writable by the image's user
    # Who depends on a service with a healthcheck waits until it is healthy.
    for name, service in services.items():
        for needed, how in (service.get("depends_on") or {}).items():
            if needed in LONG_RUNNING:
                assert how["condition"] == "service_healthy", (name, needed)


def test_a_stopped_service_gets_longer_than_its_own_grace_period() -> None:
    """compose's stop_grace_period (then SIGKILL) is longer than the time the worker
    lets running activities finish, and than the gateway's drain."""
    spec = yaml.safe_load(compose("config", **SECRETS).stdout)
    worker = spec["services"]["worker"]
    grace = worker["environment"]["PARLEY_WORKER_GRACE_SECONDS"]
    assert float(grace) == parley.config.settings.Settings().worker_grace_seconds
    assert seconds(worker["stop_grace_period"]) >= float(grace) + 5
    gateway = spec["services"]["gateway"]
    command = gateway["command"]
    drain = float(command[command.index("--grace-seconds") + 1])
    assert seconds(gateway["stop_grace_period"]) >= drain + 5


def test_the_image_runs_as_an_unprivileged_user_with_a_writable_data_dir() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line[:1].isalpha()]
    users = [rest.strip() for word, rest in instructions if word == "USER"]
    assert users, "the image runs as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    created = re.search(r"useradd [^\n]*--uid (\d+)[^\n]* parley", dockerfile)
    assert created and user in (created.group(1), "parley"), dockerfile
    assert "chown -R parley:parley /var/lib/parley" in dockerfile
    # The user comes after the last RUN: nothing is installed as it, nothing after as root.
    words = [word for word, _ in instructions]
    assert words.index("USER") > max(i for i, word in enumerate(words) if word == "RUN")
