"""Connecting to the Temporal cluster the way the ``temporal`` CLI does (address,
namespace, API key, TLS and mTLS from its variables or a ``temporal.toml`` profile, read
by ``parley.config.temporal``), with one line saying what to check when it cannot.

Client side (the CLI, the gateway, the worker's own client; never imported by
workflows). The API key, the gRPC metadata and the client key are handed to
``parley.observability.redaction`` before they are used, and no message holds them. The SDK core's
own log lines (``WARN temporalio_client::retry ...``) do not go to the terminal: they
are forwarded to the Python logger ``temporalio.core``, which the worker and the gateway
print in their log format (redacted); the CLI drops them (its one line says what failed).
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.service import TLSConfig

from parley.client.errors import ConversationRefused
from parley.config.settings import Settings
from parley.config.temporal import Pem, TemporalAccess
from parley.contracts.errors import ErrorType
from parley.observability import tracing
from parley.observability.redaction import redact, remember_values
from parley.storage import data_converter
from parley.storage.parts import attach_client

#: The logger the SDK core's log lines are forwarded to.
CORE_LOGGER = "temporalio.core"
#: The process's runtimes, made at its first connection: one that forwards the core's
#: warnings (a server's), one that drops them (the CLI's).
_runtimes: dict[bool, Runtime] = {}


async def connect(settings: Settings, runtime: Runtime | None = None, role: str = "cli") -> Client:
    """A client for ``settings``' cluster, with its key and TLS (``settings.temporal``).
    A mistake in that configuration (an unknown profile, a certificate file that cannot
    be read) raises ValueError, as a bad setting does; a cluster that cannot be reached
    or refuses the credentials, ``ConversationRefused`` (``Unreachable``: the gateway
    tries again). Either says in one line what to check. ``runtime`` (the worker's) may
    export metrics; without it, the process's ``core_runtime`` (the CLI's, ``role``
    ``cli``, drops the core's log lines). With traces asked for (``parley.observability.tracing``),
    the client carries them, as ``parley-<role>``."""
    tracing.configure(settings, role)
    access = settings.temporal
    options = await asyncio.to_thread(_options, access)  # a mistake: ValueError, one line
    remember_values(_secrets(access, options))
    try:
        client = await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            data_converter=data_converter(settings),
            runtime=runtime or core_runtime(quiet=role == "cli"),
            plugins=tracing.plugins(),
            **options,
        )
    except RuntimeError as err:
        raise ConversationRefused(
            redact(refusal_line(err, settings)), ErrorType.UNREACHABLE
        ) from err
    attach_client(client)  # its store's part is the cluster's this client reaches
    return client


def core_runtime(*, quiet: bool) -> Runtime:
    """The process's Temporal runtime, logging as ``core_logging`` says."""
    if quiet not in _runtimes:
        _runtimes[quiet] = Runtime(telemetry=TelemetryConfig(logging=core_logging(quiet=quiet)))
    return _runtimes[quiet]


def core_logging(*, quiet: bool = False) -> LoggingConfig:
    """The SDK core's warnings and errors to the Python logger ``temporalio.core`` (or,
    ``quiet``, nowhere), never straight to stderr; for any runtime a Parley process
    makes (the worker's with metrics too)."""
    if quiet:
        return LoggingConfig(filter="off")
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )


def _options(access: TemporalAccess) -> dict[str, Any]:
    """``Client.connect``'s ``api_key``, ``tls`` and ``rpc_metadata``, with the PEM files
    read; ValueError, in one line, for a mistake in the configuration or a file."""
    if access.problem:
        raise ValueError(access.problem)
    tls: bool | TLSConfig = False
    if (given := access.tls) is not None:
        tls = TLSConfig(
            domain=given.server_name,
            server_root_ca_cert=_pem(given.server_ca_cert, "server CA certificate"),
            client_cert=_pem(given.client_cert, "client certificate"),
            client_private_key=_pem(given.client_key, "client key", "PRIVATE KEY"),
        )
    return {"api_key": access.api_key, "tls": tls, "rpc_metadata": dict(access.rpc_metadata)}


def _pem(pem: Pem | None, kind: str, label: str = "CERTIFICATE") -> bytes | None:
    if pem is None:
        return None
    try:
        data = pem.data if pem.data is not None else Path(pem.path or "").read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read the {kind} {pem}: {err.strerror}") from None
    if f"{label}-----".encode() not in data:
        raise ValueError(f"the {kind} {pem} is not PEM: no '-----BEGIN ...{label}-----' line")
    return data


#: gRPC metadata whose value is a credential (``TEMPORAL_GRPC_META_AUTHORIZATION``...).
_SECRET_HEADER = re.compile(r"auth|key|token|secret|password|cookie", re.IGNORECASE)


def _secrets(access: TemporalAccess, options: dict[str, Any]) -> list[str]:
    """What no log line, span or message may hold: the key, credentials in the gRPC
    metadata, and the lines of the client key."""
    tls = options["tls"]
    key = tls.client_private_key if isinstance(tls, TLSConfig) else None
    lines = key.decode(errors="replace").splitlines() if key else []
    return [
        access.api_key or "",
        *(value for name, value in access.rpc_metadata if _SECRET_HEADER.search(name)),
        *(line for line in lines if not line.startswith("-----")),
    ]


_CLIENT_CERT_REFUSED = re.compile(
    r"status: 49[56]|status: 400 |CertificateRequired|BadCertificate|UnknownCA|"
    r"CertificateUnknown|UnsupportedCertificate|CertificateExpired|CertificateRevoked"
)
_NOT_TLS = re.compile(r"InvalidContentType|CorruptMessage|InvalidMessage|tls handshake eof")
_PLAIN_TO_TLS = re.compile(r"h2 protocol error|http2 error|status: 400 |connection closed")


def refusal_line(err: Exception, settings: Settings) -> str:
    """What to check, in one line, when ``Client.connect`` failed with ``err``: the key,
    the client certificate, the CA, the server name, TLS itself, or the address."""
    text, address, access = str(err), settings.temporal_address, settings.temporal
    tls = access.tls
    answer = _server_words(text)
    if "code: Unauthenticated" in text or "status: 401 " in text:
        if access.api_key:
            return (
                f"Temporal at {address} refused the API key ({answer}): check "
                f"{access.api_key_origin}; is the key current, and for namespace "
                f"{settings.namespace}?"
            )
        hint = "set TEMPORAL_API_KEY"
        if not (tls and tls.client_cert):
            hint += ", or a client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH and _KEY_PATH)"
        return f"Temporal at {address} wants an API key ({answer}): {hint}"
    if "code: PermissionDenied" in text or "status: 403 " in text:
        who = (
            f"the API key ({access.api_key_origin})"
            if access.api_key
            else f"the client certificate {tls.client_cert}"
            if tls and tls.client_cert
            else "an unauthenticated client"
        )
        return (
            f"Temporal at {address} denies namespace {settings.namespace} to {who} ({answer}): "
            "check TEMPORAL_NAMESPACE and what the credentials may use"
        )
    if tls is not None:
        if _CLIENT_CERT_REFUSED.search(text):
            if tls.client_cert is None:
                return (
                    f"Temporal at {address} asks for a client certificate ({answer}): set "
                    "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"
                )
            return (
                f"Temporal at {address} refused the client certificate {tls.client_cert} "
                f"({answer}): is it signed by a CA the server trusts, and current?"
            )
        if "InvalidCertificate" in text:
            return _server_certificate(text, address, tls.server_name, tls.server_ca_cert)
        if _NOT_TLS.search(text):
            return (
                f"Temporal at {address} does not answer in TLS ({_inner(text)}): check the "
                "port, or set TEMPORAL_TLS=false if it is a plain endpoint"
            )
        if "PrivateKey" in text or "KeyMismatch" in text:
            return (
                f"the client key {tls.client_key} cannot be used ({_inner(text)}): give "
                "the PEM private key (PKCS#8, PKCS#1 or SEC1) of the client certificate"
            )
    reason = _connect_reason(err)
    if tls is None and _PLAIN_TO_TLS.search(text):
        return (
            f"cannot reach Temporal at {address} ({reason}). Does it take TLS? Then set "
            "TEMPORAL_TLS=true."
        )
    origin = access.address_origin
    if origin and not origin.startswith("TEMPORAL_"):
        return f"cannot reach Temporal at {address} ({reason}). Is the {origin} right?"
    return (
        f"cannot reach Temporal at {address} ({reason}). "
        "Is `parley dev` running, or TEMPORAL_ADDRESS set to your cluster?"
    )


def _server_certificate(text: str, address: str, server_name: str | None, ca: Pem | None) -> str:
    """The line for a server certificate the client does not accept."""
    theirs = f"the certificate of Temporal at {address}"
    if "NotValidForName" in text:
        expected = server_name or address.rpartition(":")[0].strip("[]")
        presented = re.findall(
            r'(?:DnsName|IpAddress)\(\\?"([^"\\]+)', text.partition("presented")[2]
        )
        names = f"for {', '.join(presented)}, not" if presented else "not for"
        return f"{theirs} is {names} {expected}: set TEMPORAL_TLS_SERVER_NAME to a name it is for"
    if "Expired" in text or "NotValidYet" in text:
        return f"{theirs} has expired or is not valid yet: check it, and this machine's clock"
    if "UnknownIssuer" in text or "BadSignature" in text:
        if ca is not None:
            return f"{theirs} is not signed by the CA {ca}: give your cluster's CA certificate"
        return (
            f"{theirs} is not signed by a CA this machine trusts: set "
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH to your cluster's CA certificate"
        )
    return (
        f"{theirs} is not accepted ({_inner(text)}): check TEMPORAL_TLS_SERVER_CA_CERT_PATH "
        "and TEMPORAL_TLS_SERVER_NAME"
    )


def _server_words(text: str) -> str:
    """What the server (or a proxy in front of it) answered: its gRPC message, or the
    HTTP status of a front that answered in HTTP."""
    status = re.search(r"status: (\d{3} [A-Za-z ]*[A-Za-z])", text)
    if status:
        return f"HTTP {status.group(1)}"
    found = re.findall(r'message: "([^"]+)"', text)
    return found[-1] if found else _inner(text)


def _inner(text: str) -> str:
    """The innermost error's name, as the Rust transport gives it
    (``InvalidMessage(InvalidContentType)``), without its type's wrappers."""
    found = re.findall(r"error: ([A-Za-z]+(?:\([A-Za-z]+\))?)", text)
    return found[-1] if found else _connect_reason(RuntimeError(text))


def _connect_reason(err: Exception) -> str:
    """Why a connection failed, in the words of the OS or the server, without the Rust
    transport's type names (``tonic::transport::Error(Transport, ConnectError(...``)."""
    text = str(err)
    for pattern in (r'message: "([^"]+)"', r'error: "([^"]+)"'):
        found = re.findall(pattern, text)
        if found:
            return found[-1]  # the innermost: the OS's or the server's own words
    text = re.split(r"tonic::|hyper::|Status \{|\(", text, maxsplit=1)[0]
    text = text.removeprefix("Failed client connect:").strip(" :")
    return text or "the connection failed"
