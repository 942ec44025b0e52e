"""How to reach the Temporal cluster, read the way the ``temporal`` CLI reads it: its
variables (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
``TEMPORAL_TLS``, ``TEMPORAL_TLS_SERVER_CA_CERT_PATH``, ``TEMPORAL_TLS_SERVER_NAME``,
``TEMPORAL_TLS_CLIENT_CERT_PATH``, ``TEMPORAL_TLS_CLIENT_KEY_PATH``, the ``_DATA`` forms
``TEMPORAL_TLS_SERVER_CA_CERT_DATA``, ``TEMPORAL_TLS_CLIENT_CERT_DATA``,
``TEMPORAL_TLS_CLIENT_KEY_DATA``, and ``TEMPORAL_GRPC_META_*`` headers) over a profile
of its ``temporal.toml`` (``TEMPORAL_PROFILE``, ``TEMPORAL_CONFIG_FILE``), through the
SDK's ``temporalio.envconfig``; Parley's defaults (``localhost:7233``, ``default``, no
TLS) where neither says. A variable set to nothing counts as unset.
``TEMPORAL_TLS_DISABLE_HOST_VERIFICATION`` is refused: the Python SDK cannot do it.

Imported with ``parley.config.settings`` outside the workflow sandbox (the worker, the
gateway, the CLI, the client); ``load``, which reads the ``temporal.toml`` file, runs
only in ``Settings.from_env``, at the entry points, on the environment handed to it (it
reads no variable itself). The worker, the gateway and the CLI connect with what it
found (``parley.client.connection``, which reads the PEM files). A mistake here (an
unknown profile, a bad ``TEMPORAL_TLS``) is kept and told, in one line, by the first
connection: ``parley dev``, ``parley tools`` and the plans service, which do not connect
to the configured cluster, run all the same. The API key, the gRPC metadata and a
client key are ``repr=False``, and no message holds them.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS, DataSource

DEFAULT_TEMPORAL_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
#: What the SDK reads as true and false in ``TEMPORAL_TLS`` (another value: TLS on).
_TRUE, _FALSE = ("true", "1"), ("false", "0")


@dataclass(frozen=True)
class Pem:
    """A certificate or key: a file, or PEM given inline; ``origin`` says where it was
    set (a variable, or a key of a profile), for messages."""

    path: str | None
    data: bytes | None = field(repr=False)
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})" if self.path else f"given in {self.origin}"


@dataclass(frozen=True)
class TemporalTls:
    """TLS to the cluster: the name its certificate must carry (None: the address's
    host), the CA to trust (None: the system's), and a client certificate for mTLS."""

    server_name: str | None = None
    server_ca_cert: Pem | None = None
    client_cert: Pem | None = None
    client_key: Pem | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TemporalAccess:
    """What a connection needs besides the address and namespace. The default: plain,
    no key (the dev server)."""

    api_key: str | None = field(default=None, repr=False)
    #: Where the key was set (for messages; never the key).
    api_key_origin: str = "TEMPORAL_API_KEY"
    tls: TemporalTls | None = None
    rpc_metadata: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: Where the address was set; None: Parley's default.
    address_origin: str | None = None
    #: A mistake in the configuration, told when connecting.
    problem: str | None = None


def load(env: Mapping[str, str]) -> dict[str, Any]:
    """``Settings``' ``temporal_address``, ``namespace`` and ``temporal`` from ``env``
    and the ``temporal.toml`` profile it names; Parley's defaults where neither says."""
    given = {k: v.strip() for k, v in env.items() if k.startswith("TEMPORAL_") and v.strip()}
    name = given.get("TEMPORAL_PROFILE", "default")
    file = given.get("TEMPORAL_CONFIG_FILE") or _default_file(env)
    where = f"profile {name!r} of {file}"
    problem = _problem(given, file, name)
    try:
        profile = ClientConfigProfile.load(override_env_vars=given)
    except RuntimeError as err:  # the SDK's ConfigError: no such profile, bad TOML
        reason = str(err).strip().splitlines()[0]
        problem = problem or f"cannot use {where}: {reason}"
        profile = ClientConfigProfile.load(disable_file=True, override_env_vars=given)

    def origin(variable: str, key: str) -> str:
        return variable if variable in given else f"{key} of {where}"

    tls = _tls(profile.tls, profile.api_key is not None, origin)
    if tls is not None and problem is None:
        problem = _unpaired(tls)
    return {
        "temporal_address": profile.address or DEFAULT_TEMPORAL_ADDRESS,
        "namespace": profile.namespace or DEFAULT_NAMESPACE,
        "temporal": TemporalAccess(
            api_key=profile.api_key,
            api_key_origin=origin("TEMPORAL_API_KEY", "api_key"),
            tls=tls,
            rpc_metadata=tuple(sorted(profile.grpc_meta.items())),
            address_origin=origin("TEMPORAL_ADDRESS", "address") if profile.address else None,
            problem=problem,
        ),
    }


def _tls(config: ClientConfigTLS | None, has_key: bool, origin: Any) -> TemporalTls | None:
    """TLS as the SDK decides it: on with an API key or any TLS setting, unless
    ``TEMPORAL_TLS=false`` (or the profile's ``tls.disabled``) turns it off."""
    if config is None:
        return TemporalTls() if has_key else None
    if config.disabled:
        return None

    def pem(source: DataSource | None, stem: str) -> Pem | None:
        if source is None:
            return None
        variable, key = f"TEMPORAL_TLS_{stem.upper()}", f"tls.{stem}"
        if isinstance(source, Path):
            return Pem(str(source), None, origin(f"{variable}_PATH", f"{key}_path"))
        data = source.encode() if isinstance(source, str) else source
        return Pem(None, data, origin(f"{variable}_DATA", f"{key}_data"))

    return TemporalTls(
        server_name=config.server_name,
        server_ca_cert=pem(config.server_root_ca_cert, "server_ca_cert"),
        client_cert=pem(config.client_cert, "client_cert"),
        client_key=pem(config.client_private_key, "client_key"),
    )


def _unpaired(tls: TemporalTls) -> str | None:
    """A client certificate without its key, or a key without its certificate."""
    if tls.client_cert and not tls.client_key:
        return (
            f"the client certificate {tls.client_cert} needs its key (TEMPORAL_TLS_CLIENT_KEY_PATH)"
        )
    if tls.client_key and not tls.client_cert:
        return (
            f"the client key {tls.client_key} needs its certificate (TEMPORAL_TLS_CLIENT_CERT_PATH)"
        )
    return None


def _problem(given: Mapping[str, str], file: str, profile: str) -> str | None:
    """What the SDK would take silently: a ``TEMPORAL_TLS`` it does not know (it turns
    TLS on), a config file that is not there, and host verification turned off, which
    the Python SDK cannot do."""
    tls = given.get("TEMPORAL_TLS", "true").lower()
    if tls not in _TRUE + _FALSE:
        return f"TEMPORAL_TLS={given['TEMPORAL_TLS']!r} is not true or false"
    if "TEMPORAL_CONFIG_FILE" in given and not Path(file).is_file():
        return f"TEMPORAL_CONFIG_FILE={file}: no such file"
    variable = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
    if given.get(variable, "false").lower() in _TRUE or _file_skips_verification(file, profile):
        return (
            f"{variable} (or tls.disable_host_verification) is not supported by Temporal's "
            "Python SDK: set TEMPORAL_TLS_SERVER_NAME to the name in the server's certificate"
        )
    return None


def _file_skips_verification(file: str, profile: str) -> bool:
    """Whether ``profile`` of the TOML ``file`` sets ``tls.disable_host_verification``
    (the SDK reads it, then drops it)."""
    try:
        found = tomllib.loads(Path(file).read_text())
    except (OSError, ValueError):
        return False  # a missing file is no profile; a bad one, the SDK's error
    profiles = found.get("profile")
    entry = profiles.get(profile) if isinstance(profiles, dict) else None
    tls = entry.get("tls") if isinstance(entry, dict) else None
    return isinstance(tls, dict) and tls.get("disable_host_verification") is True


def _default_file(env: Mapping[str, str]) -> str:
    """Where the SDK looks for ``temporal.toml`` when ``TEMPORAL_CONFIG_FILE`` is unset
    (the platform's config directory)."""
    if sys.platform == "darwin":
        base = f"{env.get('HOME', '~')}/Library/Application Support"
    elif sys.platform == "win32":
        base = env.get("APPDATA", "%APPDATA%")
    else:
        base = env.get("XDG_CONFIG_HOME") or f"{env.get('HOME', '~')}/.config"
    return str(Path(base) / "temporalio" / "temporal.toml")
