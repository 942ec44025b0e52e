"""End to end: Parley connects to a secured cluster the way the ``temporal`` CLI does:
TLS with the cluster's CA and server name, a client certificate (mTLS) and an API key,
from the variables or from a ``temporal.toml`` profile. The cluster is the session's dev
server behind Debian's nginx (tests.support.tls_proxy: TLS, client certificates
required, a bearer key checked), shared by the module's tests. Each setting that is
wrong is one line on stderr saying what to check, exit code 1, never a traceback or the
SDK core's own log lines; the key and the client key are in no log, message or history.
Client side: real ``parley`` processes, a real worker."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.config.settings import Settings
from parley.config.temporal import load
from parley.storage import LocalFileStorageDriver
from tests.support.cli import assert_one_line_error, parley, parley_all
from tests.support.ports import free_port
from tests.support.processes import PARLEY, process
from tests.support.tls_proxy import API_KEY, DENIED_KEY, SERVER_NAME, Proxy
from tests.support.waiting import eventually

#: A guard against a hang, not a bound on speed.
PATIENCE = 300


def secured_env(secured_proxy: Proxy, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The variables of a client of the proxy (no ``temporal.toml`` of the machine's:
    an empty one), with ``extra`` over them (an empty value unsets one)."""
    empty = tmp_path / "empty.toml"
    empty.touch()
    pki = secured_proxy.pki
    env = {
        **clean_environ(),
        "TEMPORAL_CONFIG_FILE": str(empty),
        "TEMPORAL_ADDRESS": secured_proxy.address,
        "TEMPORAL_API_KEY": API_KEY,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca),
        "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
        **extra,
    }
    return {name: value for name, value in env.items() if value}


def clean_environ() -> dict[str, str]:
    """This process's environment without its ``TEMPORAL_*`` variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}


def write_profile(secured_proxy: Proxy, path: Path) -> Path:
    """A ``temporal.toml`` whose profile ``secured`` holds the whole connection."""
    pki = secured_proxy.pki
    path.write_text(
        f"""[profile.default]
address = "127.0.0.1:1"

[profile.secured]
address = "{secured_proxy.address}"
namespace = "default"
api_key = "{API_KEY}"

[profile.secured.tls]
server_name = "{SERVER_NAME}"
server_ca_cert_path = "{pki.ca}"
client_cert_path = "{pki.client_cert}"
client_key_path = "{pki.client_key}"
"""
    )
    return path


async def test_the_variables_and_a_profile_both_reach_a_worker_through_tls_and_a_key(
    secured_proxy: Proxy,
    temporal_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path: Path,
) -> None:
    queue = f"parley-secured-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "hello over mTLS"}, {"content": "and again"}]))
    common = {"PARLEY_TASK_QUEUE": queue, "PARLEY_PAYLOAD_STORE": str(payload_store.root)}
    by_variables = secured_env(secured_proxy, tmp_path, **common)
    worker = {**by_variables, "PARLEY_MODEL": f"script:{script}", "PARLEY_TOOLS": ""}
    profile = write_profile(secured_proxy, tmp_path / "temporal.toml")
    by_profile = {
        **clean_environ(),
        **common,
        "TEMPORAL_CONFIG_FILE": str(profile),
        "TEMPORAL_PROFILE": "secured",
    }
    log = tmp_path / "worker.log"
    watching = Conversations(temporal_env.client, Settings(task_queue=queue))
    session = f"secured-{uuid.uuid4().hex[:8]}"
    with process([*PARLEY, "worker"], worker, log):
        await eventually(watching.workers_polling, PATIENCE, "the worker to poll via nginx")
        first = parley(by_variables, "send", "-s", session, "-u", "alice", "--json", "hi")
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout)["reply"] == "hello over mTLS"
        second = parley(by_profile, "send", "-s", session, "-u", "alice", "--json", "again")
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout)["reply"] == "and again"
        listed = parley(by_profile, "list", "-u", "alice", "--json")
        assert listed.returncode == 0 and session in listed.stdout, listed.stderr

    # The key and the client key went nowhere: not in the worker's log, the commands'
    # output, nor the conversation's history.
    key_lines = secured_proxy.pki.client_key.read_text().splitlines()[1:-1]
    history = await temporal_env.client.get_workflow_handle(
        f"conversation-{session}"
    ).fetch_history()
    for text in (log.read_text(), first.stdout + first.stderr, json.dumps(history.to_json())):
        assert API_KEY not in text
        assert not any(line in text for line in key_lines)
    assert "WARN" not in first.stderr + second.stderr + listed.stderr


def test_each_wrong_setting_is_one_line_saying_what_to_check(
    secured_proxy: Proxy, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    pki = secured_proxy.pki
    plain = temporal_env.client.service_client.config.target_host
    profile = write_profile(secured_proxy, tmp_path / "temporal.toml")
    missing = tmp_path / "missing.pem"
    cases = [
        (
            {"TEMPORAL_API_KEY": ""},
            "wants an API key (Request unauthorized.): set TEMPORAL_API_KEY",
        ),
        (
            {"TEMPORAL_API_KEY": "not-the-key-0000"},
            "refused the API key (HTTP 401 Unauthorized): check TEMPORAL_API_KEY",
        ),
        (
            {"TEMPORAL_API_KEY": DENIED_KEY},
            "denies namespace default to the API key (TEMPORAL_API_KEY) (Request unauthorized.)",
        ),
        (
            {"TEMPORAL_TLS_CLIENT_CERT_PATH": "", "TEMPORAL_TLS_CLIENT_KEY_PATH": ""},
            "asks for a client certificate (HTTP 400 Bad Request): set "
            "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH",
        ),
        (
            {
                "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.other_client_cert),
                "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.other_client_key),
            },
            f"refused the client certificate {pki.other_client_cert} "
            "(TEMPORAL_TLS_CLIENT_CERT_PATH) (HTTP 400 Bad Request): is it signed by a CA",
        ),
        (
            {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.other_ca)},
            f"is not signed by the CA {pki.other_ca} (TEMPORAL_TLS_SERVER_CA_CERT_PATH)",
        ),
        (
            {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": ""},
            "is not signed by a CA this machine trusts: set TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        ),
        (
            {"TEMPORAL_TLS_SERVER_NAME": "wrong.example"},
            f"is for {SERVER_NAME}, not wrong.example: set TEMPORAL_TLS_SERVER_NAME",
        ),
        (
            {"TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"},
            "(Connection refused). Is `parley dev` running, or TEMPORAL_ADDRESS set",
        ),
        (
            {"TEMPORAL_TLS_CLIENT_CERT_PATH": str(missing)},
            f"cannot read the client certificate {missing} (TEMPORAL_TLS_CLIENT_CERT_PATH): "
            "No such file or directory",
        ),
        (
            {"TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_cert)},  # the certificate again
            f"the client key {pki.client_cert} (TEMPORAL_TLS_CLIENT_KEY_PATH) is not PEM",
        ),
        ({"TEMPORAL_TLS": "false"}, "Does it take TLS? Then set TEMPORAL_TLS=true"),
        (
            {"TEMPORAL_ADDRESS": plain, "TEMPORAL_API_KEY": "", "TEMPORAL_TLS": "true"},
            f"Temporal at {plain} does not answer in TLS",
        ),
        ({"TEMPORAL_TLS": "yes"}, "TEMPORAL_TLS='yes' is not true or false"),
        (
            {"TEMPORAL_CONFIG_FILE": str(profile), "TEMPORAL_PROFILE": "nope"},
            f"cannot use profile 'nope' of {profile}: Profile 'nope' not found",
        ),
        (
            {"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"},
            "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION (or tls.disable_host_verification) is not "
            "supported",
        ),
    ]
    results = parley_all(
        *(
            (secured_env(secured_proxy, tmp_path, **change), ["list", "-u", "alice"])
            for change, _ in cases
        )
    )
    for (change, expected), result in zip(cases, results, strict=True):
        assert_one_line_error(result, expected)
        assert "WARN" not in result.stderr, (change, result)
        assert API_KEY not in result.stderr and DENIED_KEY not in result.stderr


def test_a_call_the_sdk_retries_leaves_no_sdk_log_line_on_the_terminal(
    secured_proxy: Proxy, tmp_path: Path
) -> None:
    """The proxy lets the connection through, then answers UNAVAILABLE (asked to by the
    gRPC metadata of TEMPORAL_GRPC_META_*): the SDK retries the call for seconds, and its
    core would print a ``WARN temporalio_client::retry`` line for each retry."""
    env = secured_env(secured_proxy, tmp_path, TEMPORAL_GRPC_META_X_PARLEY_FAULT="unavailable")
    result = parley(env, "list", "-u", "alice")
    assert_one_line_error(result, "Temporal refused to list conversations: the cluster is unavail")
    assert "WARN" not in result.stderr and "retried" not in result.stderr


def test_a_worker_with_a_refused_key_says_so_in_one_line(
    secured_proxy: Proxy, tmp_path: Path
) -> None:
    env = {
        **secured_env(secured_proxy, tmp_path, TEMPORAL_API_KEY="not-the-key-0000"),
        "PARLEY_TOOLS": "",
    }
    result = parley(env, "worker")
    assert result.returncode == 1, result
    *warnings, last = result.stderr.splitlines()
    assert last.startswith("error: Temporal at ") and "refused the API key" in last, last
    assert all(line.startswith("warning: no tools") for line in warnings), result.stderr
    assert "WARN" not in result.stderr and "Traceback" not in result.stderr


def test_nothing_set_is_parleys_default_and_the_variables_win_over_a_profile(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty.toml").touch()  # not the machine's own temporal.toml
    plain = load({"TEMPORAL_CONFIG_FILE": str(tmp_path / "empty.toml")})
    assert (plain["temporal_address"], plain["namespace"]) == ("localhost:7233", "default")
    assert plain["temporal"].tls is None and plain["temporal"].api_key is None

    profile = tmp_path / "temporal.toml"
    profile.write_text(
        '[profile.cloud]\naddress = "ns.acct.tmprl.cloud:7233"\nnamespace = "ns.acct"\n'
        'api_key = "from-the-profile"\n'
    )
    env = {"TEMPORAL_CONFIG_FILE": str(profile), "TEMPORAL_PROFILE": "cloud"}
    cloud = load(env)
    access = cloud["temporal"]
    assert (cloud["temporal_address"], cloud["namespace"]) == (
        "ns.acct.tmprl.cloud:7233",
        "ns.acct",
    )
    assert access.api_key == "from-the-profile" and access.tls is not None  # a key: TLS
    assert access.api_key_origin == f"api_key of profile 'cloud' of {profile}"
    assert "from-the-profile" not in repr(access)

    overridden = load(
        {**env, "TEMPORAL_NAMESPACE": "other", "TEMPORAL_TLS": "false", "TEMPORAL_ADDRESS": " "}
    )
    assert overridden["namespace"] == "other"  # the variable over the profile
    assert overridden["temporal_address"] == "ns.acct.tmprl.cloud:7233"  # empty: unset
    assert overridden["temporal"].tls is None  # TLS off, the key still sent


def test_a_broken_temporal_configuration_stops_only_what_connects(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``parley dev``, ``parley tools``, the plans service read the settings but do not
    connect to the configured cluster: a bad ``TEMPORAL_*`` does not stop them."""
    for name in [name for name in os.environ if name.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", "-----BEGIN PRIVATE KEY-----\nabcdef\n")
    settings = Settings.from_env()
    assert (
        settings.temporal.problem
        == f"TEMPORAL_CONFIG_FILE={tmp_path / 'absent.toml'}: no such file"
    )
    assert "abcdef" not in repr(settings)
