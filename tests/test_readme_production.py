"""End to end: the README's production part, run as written where it can be: everything
but a Docker engine and a real Temporal Cloud.

- "Connecting to a secured cluster": each shell block's variables and the
  ``temporal.toml`` profile, with only the README's placeholder values swapped for local
  ones, reach a real worker through Debian's nginx (tests.support.tls_proxy), which
  stands for each cluster the README names: Cloud by API key (the machine's trust store
  is ``SSL_CERT_FILE``, holding the test CA, as a public CA would be), Cloud by mTLS,
  and a self-hosted cluster with its own CA and server name. A README that sets a new
  variable or value fails here until the test knows what it stands for.
- "Running on a cluster (docker-compose)": its shell block runs with ``docker compose
  up`` standing as ``docker-compose config`` (Debian's, no engine): the tokens file it
  writes is one the gateway reads, and the secrets it sets are all compose needs. The
  services themselves run from packages in tests/test_many_hosts.py and
  tests/test_operations.py.

Client side: real ``parley`` processes and a real worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.config.settings import Settings
from parley.gateway.access import TokenTable
from parley.storage import LocalFileStorageDriver
from tests.support.cli import parley_all
from tests.support.processes import PARLEY, ROOT, process
from tests.support.readme import blocks, commands, exports, section
from tests.support.tls_proxy import API_KEY, SERVER_NAME, Proxy
from tests.support.waiting import eventually

#: A guard against a hang, not a bound on speed.
PATIENCE = 300


def local_values(secured_proxy: Proxy) -> dict[str, str]:
    """Each placeholder value of the README's production part, and what stands for it."""
    pki = secured_proxy.pki
    return {
        "us-east-1.aws.api.temporal.io:7233": secured_proxy.api_key_address,
        "parley.a1b2c.tmprl.cloud:7233": secured_proxy.mtls_address,
        "temporal.internal.example:7233": secured_proxy.tls_address,
        "parley.a1b2c": "default",
        "parley": "default",
        "…": API_KEY,
        "/etc/parley/client.pem": str(pki.client_cert),
        "/etc/parley/client.key": str(pki.client_key),
        "/etc/parley/temporal-ca.pem": str(pki.ca),
        "temporal.internal.example": SERVER_NAME,
    }


def swapped(values: dict[str, str], local: dict[str, str]) -> dict[str, str]:
    unknown = {name: value for name, value in values.items() if value not in local}
    assert not unknown, f"the README sets values this test does not know: {unknown}"
    return {name: local[value] for name, value in values.items()}


def machine(tmp_path: Path, secured_proxy: Proxy, **extra: str) -> dict[str, str]:
    """A machine with no Temporal variables and no ``temporal.toml``, whose trust store
    holds the test CA (as a public CA is in every machine's)."""
    empty = tmp_path / "no-temporal.toml"
    empty.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "SSL_CERT"))}
    return {
        **env,
        "TEMPORAL_CONFIG_FILE": str(empty),
        "SSL_CERT_FILE": str(secured_proxy.pki.ca),
        **extra,
    }


def profile_file(block: str, local: dict[str, str], path: Path) -> Path:
    """The README's ``temporal.toml``, its values swapped, written to ``path``."""
    tables = tomllib.loads(block)["profile"]
    lines: list[str] = []
    for name, profile in tables.items():
        lines.append(f"[profile.{name}]")
        scalars = {k: v for k, v in profile.items() if not isinstance(v, dict)}
        lines += [f"{key} = {json.dumps(value)}" for key, value in swapped(scalars, local).items()]
        for table, values in profile.items():
            if isinstance(values, dict):
                lines.append(f"[profile.{name}.{table}]")
                lines += [f"{k} = {json.dumps(v)}" for k, v in swapped(values, local).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_the_secured_cluster_section_runs_as_written(
    secured_proxy: Proxy,
    temporal_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path: Path,
) -> None:
    text = section("Connecting to a secured cluster")
    cloud_key, cloud_mtls, self_hosted = blocks(text, "bash")
    (profile_block,) = blocks(text, "toml")
    local = local_values(secured_proxy)
    queue = f"parley-readme-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "hello from the README"}]))
    common = {"PARLEY_TASK_QUEUE": queue, "PARLEY_PAYLOAD_STORE": str(payload_store.root)}

    # The API key block starts the worker, as it says.
    assert commands(cloud_key) == ["parley worker"]
    by_key = machine(tmp_path, secured_proxy, **common, **swapped(exports(cloud_key), local))
    worker = {**by_key, "PARLEY_MODEL": f"script:{script}", "PARLEY_TOOLS": ""}
    clients = {
        "API key": by_key,
        "mTLS": machine(tmp_path, secured_proxy, **common, **swapped(exports(cloud_mtls), local)),
        "self-hosted TLS": machine(
            tmp_path, secured_proxy, **common, **swapped(exports(self_hosted), local)
        ),
        "profile": machine(
            tmp_path,
            secured_proxy,
            **common,
            TEMPORAL_CONFIG_FILE=str(profile_file(profile_block, local, tmp_path / "t.toml")),
            TEMPORAL_PROFILE="prod",
        ),
    }
    watching = Conversations(temporal_env.client, Settings(task_queue=queue))
    with process([*PARLEY, "worker"], worker, tmp_path / "worker.log"):
        await eventually(watching.workers_polling, PATIENCE, "the README's worker to poll")
        sessions = {way: f"readme-{uuid.uuid4().hex[:8]}" for way in clients}
        sent = parley_all(
            *(
                (env, ["send", "-s", sessions[way], "-u", "alice", "--json", "hi"])
                for way, env in clients.items()
            )
        )
    for way, result in zip(clients, sent, strict=True):
        assert result.returncode == 0, f"{way}: {result.stderr}"
        assert json.loads(result.stdout)["reply"] == "hello from the README", way
        assert "WARN" not in result.stderr, way


def test_the_compose_section_runs_as_written_but_for_the_engine(tmp_path: Path) -> None:
    (block,) = blocks(section("Running on a cluster (docker-compose)"), "bash")
    assert block.rstrip().endswith("docker compose up --build"), block
    # `docker compose up` stands as `docker-compose config`: what the engine would be given.
    docker = f'docker() {{ shift; docker-compose -f "{ROOT}/docker-compose.yml" config -q; }}\n'
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", docker + block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    table = TokenTable.from_file(tmp_path / "gateway-tokens")  # what the gateway reads
    token = (tmp_path / "gateway-tokens").read_text().split()[1]
    assert table.user_for(token) == "alice"
