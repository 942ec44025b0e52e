"""A secured Temporal front for the tests: certificates made with ``cryptography`` (a CA,
the server's certificate, a client certificate, and the same from a second CA nobody
trusts), and Debian's nginx terminating TLS in front of a plain dev server, as a
cluster behind a load balancer is run: gRPC passed on (``grpc_pass``), a client
certificate required (``ssl_verify_client on``) and a bearer API key checked (the SDK
sends ``authorization: Bearer <key>``); on request, every call after the first fails as
an unavailable cluster's does. Three more listeners stand for the README's other
clusters: Temporal Cloud with an API key (no client certificate; a certificate for the
address itself, ``127.0.0.1``, as a public endpoint's names its host), Cloud with mTLS
(no key) and a self-hosted cluster with TLS only. Client side: the test starts it, on a free port of
127.0.0.1, as its own child process (no daemon) with its prefix in a temp dir.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.ports import free_port

#: The name in the server's certificate (the proxy listens on 127.0.0.1: a client
#: names it with TEMPORAL_TLS_SERVER_NAME).
SERVER_NAME = "temporal.parley.test"
#: The key the proxy lets through.
API_KEY = "parley-test-api-key-2f9c41d7e8"
#: A key the proxy knows, that may not use the namespace (PERMISSION_DENIED).
DENIED_KEY = "parley-test-denied-key-77ab0c"


@dataclass(frozen=True)
class Pki:
    """The PEM files of ``make_pki``: ``ca`` signed ``server`` and ``client``; ``other_ca``
    signed ``other_client`` (a certificate the proxy does not know)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path
    public_server_cert: Path
    public_server_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _ca(directory: Path, stem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"Parley test {stem}"))
        .issuer_name(_name(f"Parley test {stem}"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _leaf(
    directory: Path,
    stem: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    *,
    server: bool,
    by_address: bool = False,
) -> None:
    ca_cert, ca_key = issuer
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(SERVER_NAME if server else f"parley-{stem}"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        names: list[x509.GeneralName] = [x509.DNSName(SERVER_NAME)]
        if by_address:
            names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, directory / f"{stem}.key")


def make_pki(directory: Path) -> Pki:
    """Two CAs and their certificates, as PEM files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = _ca(directory, "ca"), _ca(directory, "other-ca")
    _leaf(directory, "server", ca, server=True)
    _leaf(directory, "client", ca, server=False)
    _leaf(directory, "other-client", other, server=False)
    _leaf(directory, "public-server", ca, server=True, by_address=True)
    return Pki(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
        other_client_cert=directory / "other-client.pem",
        other_client_key=directory / "other-client.key",
        public_server_cert=directory / "public-server.pem",
        public_server_key=directory / "public-server.key",
    )


def nginx() -> str | None:
    """Debian's nginx (``.ci/run`` installs it), or None."""
    return shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None
    )


def _conf(prefix: Path, pki: Pki, ports: Ports, upstream: str) -> str:
    # As root, the workers would run as `nobody` and could not use the prefix's temp
    # directories; unprivileged, the directive is ignored.
    user = "user root;\n" if os.geteuid() == 0 else ""
    servers = "\n".join(
        [
            _server(ports.secured, pki.server_cert, pki.server_key, pki, True, True, upstream),
            _server(
                ports.api_key,
                pki.public_server_cert,
                pki.public_server_key,
                pki,
                False,
                True,
                upstream,
            ),
            _server(
                ports.mtls,
                pki.public_server_cert,
                pki.public_server_key,
                pki,
                True,
                False,
                upstream,
            ),
            _server(ports.tls, pki.server_cert, pki.server_key, pki, False, False, upstream),
        ]
    )
    return f"""{user}daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    # A client that sends `x-parley-fault: unavailable` (TEMPORAL_GRPC_META_X_PARLEY_FAULT)
    # connects, then finds every other call UNAVAILABLE: the SDK retries it for seconds.
    map "$http_x_parley_fault:$uri" $parley_fault {{
        "~^unavailable:/temporal.api.workflowservice.v1.WorkflowService/(?!GetSystemInfo$)" 1;
        default 0;
    }}
{servers}
}}
"""


def _server(
    port: int,
    cert: Path,
    key: Path,
    pki: Pki,
    client_certificate: bool,
    api_key: bool,
    upstream: str,
) -> str:
    """One listener: TLS with ``cert``; a client certificate of ``pki.ca`` required if
    ``client_certificate``; the bearer key checked if ``api_key``."""
    client_certificates = (
        f"        ssl_client_certificate {pki.ca};\n        ssl_verify_client on;\n"
        if client_certificate
        else ""
    )
    key_checks = (
        f"""            # No key at all: a gRPC answer, UNAUTHENTICATED (16), as Temporal Cloud's.
            if ($http_authorization = "") {{
                add_header grpc-status 16 always;
                add_header grpc-message "Request unauthorized." always;
                return 200;
            }}
            if ($http_authorization = "Bearer {DENIED_KEY}") {{
                add_header grpc-status 7 always;
                add_header grpc-message "Request unauthorized." always;
                return 200;
            }}
            # Another key: what a plain HTTP front answers (401).
            if ($http_authorization != "Bearer {API_KEY}") {{
                return 401;
            }}
"""
        if api_key
        else ""
    )
    return f"""    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
{client_certificates}        client_max_body_size 0;
        grpc_read_timeout 3600s;
        grpc_send_timeout 3600s;
        default_type application/grpc;
        location / {{
{key_checks}            if ($parley_fault) {{
                add_header grpc-status 14 always;
                add_header grpc-message "the cluster is unavailable" always;
                return 200;
            }}
            grpc_pass grpc://{upstream};
        }}
    }}
"""


@dataclass(frozen=True)
class Ports:
    secured: int
    api_key: int
    mtls: int
    tls: int


@dataclass(frozen=True)
class Proxy:
    #: TLS, a client certificate and the key (the server's name: ``SERVER_NAME``).
    address: str
    pki: Pki
    log: Path
    #: The README's clusters: Cloud by API key, Cloud by mTLS (both certified for
    #: 127.0.0.1, by ``pki.ca``), self-hosted with TLS only (``SERVER_NAME``).
    api_key_address: str = ""
    mtls_address: str = ""
    tls_address: str = ""


@contextmanager
def tls_proxy(directory: Path, upstream: str) -> Iterator[Proxy]:
    """nginx on a free port of 127.0.0.1, in front of ``upstream`` (``host:port`` of a
    plain Temporal frontend), with the certificates of ``make_pki`` in ``directory``."""
    binary = nginx()
    assert binary is not None, "nginx is not installed (.ci/run installs it)"
    pki = make_pki(directory / "pki")
    prefix = directory / "nginx"
    prefix.mkdir()
    ports = Ports(free_port(), free_port(), free_port(), free_port())
    conf = prefix / "nginx.conf"
    conf.write_text(_conf(prefix, pki, ports, upstream))
    log = prefix / "error.log"
    with (prefix / "stderr.log").open("ab") as out:
        started = subprocess.Popen(
            [binary, "-p", str(prefix), "-c", str(conf), "-e", str(log)],
            stdout=out,
            stderr=out,
        )
    try:
        for port in (ports.secured, ports.api_key, ports.mtls, ports.tls):
            _wait_for_listener(started, port, prefix)
        yield Proxy(
            address=f"127.0.0.1:{ports.secured}",
            pki=pki,
            log=log,
            api_key_address=f"127.0.0.1:{ports.api_key}",
            mtls_address=f"127.0.0.1:{ports.mtls}",
            tls_address=f"127.0.0.1:{ports.tls}",
        )
    finally:
        started.terminate()  # nginx's fast shutdown
        try:
            started.wait(timeout=30)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait(timeout=30)


def _wait_for_listener(started: subprocess.Popen[bytes], port: int, prefix: Path) -> None:
    """Until nginx accepts connections on ``port``; fails at once if it exits."""
    while True:
        if started.poll() is not None:
            output = (prefix / "stderr.log").read_text() + (prefix / "error.log").read_text()
            raise AssertionError(f"nginx exited ({started.returncode}): {output}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return
        except OSError:
            time.sleep(0.05)
