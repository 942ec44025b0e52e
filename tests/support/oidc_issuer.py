"""A local OpenID Connect issuer for the gateway's tests: a real HTTP server on
127.0.0.1 (Starlette under uvicorn, in a thread of the test process) that serves
discovery, a JWKS, an ``/authorize`` that signs in its test user at once (redirecting
back with a code and the state) and a ``/token`` endpoint that checks the PKCE verifier
(S256), with CORS for the page. Keys are made with ``cryptography`` and tokens signed
with PyJWT; a test can add and withdraw keys (rotation), make the JWKS answer 503 (the
issuer down) and read how many times the JWKS was fetched."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.support.ports import free_port

AUDIENCE = "parley-gateway"
CLIENT_ID = "parley-page"


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        jwk = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


def new_key(kid: str, alg: str = "RS256") -> SigningKey:
    if alg.startswith(("RS", "PS")):
        private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(alg)
    return SigningKey(kid, alg, private)


@dataclass
class LocalIssuer:
    """The issuer's state; ``url`` once it serves."""

    url: str = ""
    keys: dict[str, SigningKey] = field(default_factory=dict)
    published: list[str] = field(default_factory=list)
    #: What ``/authorize`` signs in, and the groups its tokens carry.
    user: str = "carol"
    groups: list[str] = field(default_factory=lambda: ["ops"])
    jwks_fetches: int = 0
    jwks_down: bool = False
    #: Extra (symmetric) entries put in the JWKS as they are: a key no verifier may load.
    extra_jwks: list[dict[str, Any]] = field(default_factory=list)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    current: str = ""

    # --- keys ---------------------------------------------------------------------

    def add_key(self, kid: str, alg: str = "RS256", *, publish: bool = True) -> SigningKey:
        key = new_key(kid, alg)
        self.keys[kid] = key
        if publish:
            self.published.append(kid)
        return key

    def sign_with(self, kid: str) -> None:
        self.current = kid

    def withdraw(self, kid: str) -> None:
        self.published.remove(kid)

    # --- tokens -------------------------------------------------------------------

    def claims(self, user: str | None = None, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": user or self.user,
            "groups": list(self.groups),
            "iat": now,
            "nbf": now - 5,
            "exp": now + 300,
        }
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}

    def token(
        self,
        user: str | None = None,
        *,
        kid: str | None = None,
        headers: dict[str, Any] | None = None,
        **changes: Any,
    ) -> str:
        """A token signed by key ``kid`` (by default the current one); ``changes``
        replace claims (None leaves one out)."""
        key = self.keys[kid or self.current]
        return jwt.encode(
            self.claims(user, **changes),
            key.private,
            algorithm=key.alg,
            headers={"kid": key.kid, **(headers or {})},
        )

    # --- the HTTP app -------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/jwks", self._jwks),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST", "OPTIONS"]),
            ]
        )

    async def _discovery(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.url,
                "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }
        )

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        if self.jwks_down:
            return JSONResponse({"error": "down"}, status_code=503)
        keys = [self.keys[kid].public_jwk() for kid in self.published]
        return JSONResponse({"keys": [*keys, *self.extra_jwks]})

    async def _authorize(self, request: Request) -> Response:
        """Signs in ``user`` at once: back to ``redirect_uri`` with a code and the state."""
        q = request.query_params
        if (
            q.get("response_type") != "code"
            or q.get("client_id") != CLIENT_ID
            or q.get("code_challenge_method") != "S256"
            or not q.get("code_challenge")
            or "openid" not in q.get("scope", "").split()
        ):
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "challenge": q["code_challenge"],
            "redirect_uri": q["redirect_uri"],
            "user": self.user,
        }
        back = f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q.get('state', '')})}"
        return RedirectResponse(back, status_code=302)

    async def _token(self, request: Request) -> Response:
        cors = {"Access-Control-Allow-Origin": request.headers.get("origin", "*")}
        if request.method == "OPTIONS":
            cors["Access-Control-Allow-Methods"] = "POST"
            cors["Access-Control-Allow-Headers"] = "content-type"
            return Response(status_code=204, headers=cors)
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append(form)
        grant = self.codes.pop(form.get("code", ""), None)  # a code works once

        def refuse(why: str) -> Response:
            return JSONResponse(
                {"error": "invalid_grant", "error_description": why}, 400, headers=cors
            )

        if form.get("grant_type") != "authorization_code" or grant is None:
            return refuse("unknown or used code")
        if form.get("client_id") != CLIENT_ID or form.get("redirect_uri") != grant["redirect_uri"]:
            return refuse("client or redirect_uri does not match")
        digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant["challenge"]:
            return refuse("the PKCE verifier does not match the challenge")
        return JSONResponse(
            {
                "access_token": self.token(grant["user"]),
                "id_token": self.token(grant["user"], aud=CLIENT_ID),
                "token_type": "Bearer",
                "expires_in": 300,
            },
            headers={**cors, "Cache-Control": "no-store"},
        )


@contextlib.contextmanager
def local_issuer() -> Iterator[LocalIssuer]:
    """A ``LocalIssuer`` serving on ``http://127.0.0.1:<free port>`` with one RS256 key
    (``k1``), in a thread, while the block runs."""
    issuer = LocalIssuer()
    issuer.add_key("k1")
    issuer.sign_with("k1")
    port = free_port()
    issuer.url = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(
        uvicorn.Config(issuer.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="oidc-issuer", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the issuer did not start"
        time.sleep(0.02)
    try:
        yield issuer
    finally:
        server.should_exit = True
        thread.join(timeout=10)
