"""Users from an OpenID Connect provider: a bearer JWT verified against the issuer's
keys. Client side (the gateway; nothing here reaches a workflow but the user id and
groups it finds).

``OidcVerifier.start`` reads the issuer's discovery document and its JWKS (httpx, with
timeouts); a failure there is one line (``OidcUnavailable``) and the gateway does not
start. ``identify`` checks a token with PyJWT: an asymmetric algorithm only (RS*, PS*,
ES*, EdDSA; ``none`` and HMAC are refused before any key is looked at, and a symmetric
key in the JWKS is never loaded), the key named by ``kid`` from the cached JWKS (an
unknown ``kid`` fetches the JWKS again, at most once per ``jwks_refresh_seconds``, one
fetch at a time; the whole set is fetched again after ``jwks_max_age_seconds``), then
the signature, ``iss``, ``aud``, ``exp`` and ``nbf`` (with ``leeway_seconds``). The user
id is the user claim's, checked with ``parley.contracts.check_user_id``.

Every refusal is ``Refused`` (the guard answers 401 ``Unauthenticated``) saying what
was wrong, never echoing the token; an issuer that cannot be reached when a key must
be fetched is ``IssuerUnreachable`` (503 ``Unreachable``): keys already held keep
working meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from parley.contracts import check_user_id
from parley.gateway.oidc_settings import GROUP_PREFIX, OidcSettings, checked_groups

log = logging.getLogger("parley.gateway")

#: The algorithms a token may be signed with, and the key type each needs.
ALGORITHMS: dict[str, tuple[type, ...]] = {
    **{f"RS{n}": (rsa.RSAPublicKey,) for n in (256, 384, 512)},
    **{f"PS{n}": (rsa.RSAPublicKey,) for n in (256, 384, 512)},
    "ES256": (ec.EllipticCurvePublicKey,),
    "ES384": (ec.EllipticCurvePublicKey,),
    "ES512": (ec.EllipticCurvePublicKey,),
    "EdDSA": (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey),
}
#: The curve each ES algorithm is defined on.
CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
#: Key types a JWKS key may have to be loaded (``oct``, a shared secret, never is).
ASYMMETRIC_KEY_TYPES = ("RSA", "EC", "OKP")
#: A bearer longer than this is refused unread.
MAX_TOKEN_CHARS = 16 * 1024


class Refused(Exception):
    """The token is not accepted: one line saying why (401)."""


class IssuerUnreachable(Exception):
    """A key had to be fetched and the issuer did not answer (503)."""


class OidcUnavailable(ValueError):
    """Discovery or the first key fetch failed at start: one line."""


@dataclass(frozen=True)
class Identity:
    user_id: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Discovery:
    issuer: str
    jwks_uri: str
    authorization_endpoint: str | None
    token_endpoint: str | None


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts whose first is a JSON object: what goes to OIDC."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[0]:
        return False
    try:
        header = json.loads(_b64decode(parts[0]))
    except ValueError:
        return False
    return isinstance(header, dict)


class OidcVerifier:
    def __init__(self, settings: OidcSettings, http: httpx.AsyncClient | None = None) -> None:
        if not settings.enabled:
            raise ValueError("OIDC is not configured (PARLEY_OIDC_ISSUER)")
        self.settings = settings
        self.issuer = (settings.issuer or "").rstrip("/")
        self._http = http or httpx.AsyncClient(
            timeout=settings.fetch_timeout_seconds, follow_redirects=False
        )
        self.discovery: Discovery | None = None
        self._keys: dict[str, Any] = {}  # kid -> public key (cryptography)
        self._fetched_at = float("-inf")  # last successful fetch (monotonic)
        self._tried_at = float("-inf")  # last attempt
        self._last_failure: str | None = None
        self._fetching = asyncio.Lock()
        self.fetches = 0  # JWKS fetches so far (for metrics and tests)

    async def start(self) -> None:
        """Discovery and the first JWKS fetch; ``OidcUnavailable`` in one line if either
        fails."""
        url = f"{self.issuer}/.well-known/openid-configuration"
        try:
            document = await self._get_json(url)
        except IssuerUnreachable as err:
            raise OidcUnavailable(f"OIDC discovery failed: {err}") from None
        told = str(document.get("issuer", ""))
        if told.rstrip("/") != self.issuer:
            raise OidcUnavailable(
                f"OIDC discovery at {url} names issuer {told[:200]!r}, not "
                f"{self.settings.issuer!r}: set PARLEY_OIDC_ISSUER to the issuer exactly"
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
            raise OidcUnavailable(f"OIDC discovery at {url} gives no jwks_uri")
        self.discovery = Discovery(
            issuer=told,
            jwks_uri=jwks_uri,
            authorization_endpoint=_url_or_none(document.get("authorization_endpoint")),
            token_endpoint=_url_or_none(document.get("token_endpoint")),
        )
        try:
            await self._fetch_keys()
        except IssuerUnreachable as err:
            raise OidcUnavailable(f"OIDC keys could not be read: {err}") from None
        if not self._keys:
            raise OidcUnavailable(f"the issuer's JWKS at {jwks_uri} has no signing key")

    async def aclose(self) -> None:
        await self._http.aclose()

    def page_config(self) -> dict[str, Any] | None:
        """What the page needs to sign in (public): None without a client id, or when
        the provider's discovery names no authorization or token endpoint."""
        found = self.discovery
        if not self.settings.client_id or found is None:
            return None
        if not found.authorization_endpoint or not found.token_endpoint:
            return None
        return {
            "issuer": self.discovery.issuer,
            "client_id": self.settings.client_id,
            "scopes": self.settings.scopes,
            "authorization_endpoint": self.discovery.authorization_endpoint,
            "token_endpoint": self.discovery.token_endpoint,
            # The ID token's audience is the client id: send it where that is the audience.
            "bearer": "id_token"
            if self.settings.audience == self.settings.client_id
            else "access_token",
        }

    async def identify(self, token: str) -> Identity:
        """The verified user of ``token``; ``Refused`` or ``IssuerUnreachable``."""
        if len(token) > MAX_TOKEN_CHARS:
            raise Refused(f"the token is longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused("the token is not a well-formed JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            shown = alg if isinstance(alg, str) and len(alg) <= 16 else "unknown"
            raise Refused(
                f"the token's algorithm {shown!r} is not accepted: only asymmetric "
                "signatures (RS*, PS*, ES*, EdDSA)"
            )
        key = await self._key_for(header.get("kid"))
        if not isinstance(key, ALGORITHMS[alg]) or (
            alg in CURVES and key.curve.name != CURVES[alg]
        ):
            raise Refused(f"the token's algorithm {alg} does not fit the issuer's key")
        claims = self._decode(token, key, alg)
        groups = checked_groups(claims.get(self.settings.groups_claim))
        return Identity(self._user_of(claims), groups)

    def _decode(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.settings.audience,
                issuer=self.discovery.issuer if self.discovery else self.settings.issuer,
                leeway=self.settings.leeway_seconds,
                options={"require": ["exp", "iss", "aud"], "verify_iat": False},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("the token has expired: sign in again") from None
        except jwt.ImmatureSignatureError:
            raise Refused("the token is not valid yet (its nbf is in the future)") from None
        except jwt.InvalidAudienceError:
            raise Refused(
                f"the token is not meant for this gateway: its audience is not "
                f"{self.settings.audience!r}"
            ) from None
        except jwt.InvalidIssuerError:
            raise Refused(f"the token was not issued by {self.settings.issuer!r}") from None
        except jwt.MissingRequiredClaimError as err:
            raise Refused(f"the token has no {err.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise Refused("the token's signature does not verify") from None
        except jwt.DecodeError:
            raise Refused("the token is not a well-formed JWT") from None
        except jwt.PyJWTError as err:  # anything else PyJWT refuses: its class says what
            raise Refused(f"the token is refused ({type(err).__name__})") from None

    def _user_of(self, claims: dict[str, Any]) -> str:
        claim = self.settings.user_claim
        user = claims.get(claim)
        if not isinstance(user, str) or not user:
            raise Refused(f"the token has no {claim!r} claim (the user id)")
        try:
            check_user_id(user)
        except ValueError:
            raise Refused(f"the token's {claim!r} claim is not a valid user id") from None
        if user.startswith(GROUP_PREFIX):
            raise Refused(f"the token's {claim!r} claim names a group, not a user")
        return user

    async def _key_for(self, kid: Any) -> Any:
        if kid is not None and not isinstance(kid, str):
            raise Refused("the token's key id (kid) is not a string")
        if time.monotonic() - self._fetched_at > self.settings.jwks_max_age_seconds:
            await self._refresh(stale=True)
        key = self._pick(kid)
        if key is None:
            await self._refresh(stale=False)
            key = self._pick(kid)
        if key is None:
            if kid is None:
                raise Refused("the token names no key (kid) and the issuer has several")
            raise Refused("the token is signed by a key the issuer does not publish")
        return key

    def _pick(self, kid: str | None) -> Any:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    async def _refresh(self, *, stale: bool) -> None:
        """Fetch the JWKS again, unless one was tried within ``jwks_refresh_seconds``
        (then an earlier failure is said again). Keys held are kept if it fails; a stale
        set still serves while the issuer is down."""
        async with self._fetching:
            since = time.monotonic() - self._tried_at
            if since < self.settings.jwks_refresh_seconds:
                if self._last_failure and not stale:
                    raise IssuerUnreachable(self._last_failure)
                return
            try:
                await self._fetch_keys()
            except IssuerUnreachable as err:
                log.warning("OIDC keys could not be fetched again: %s", err)
                if not stale:
                    raise

    async def _fetch_keys(self) -> None:
        assert self.discovery is not None
        self._tried_at = time.monotonic()
        self.fetches += 1
        try:
            document = await self._get_json(self.discovery.jwks_uri)
        except IssuerUnreachable as err:
            self._last_failure = str(err)
            raise
        keys: dict[str, Any] = {}
        for index, jwk in enumerate(document.get("keys") or []):
            if not isinstance(jwk, dict) or jwk.get("kty") not in ASYMMETRIC_KEY_TYPES:
                continue  # a shared secret (oct) or garbage: never a verification key
            if jwk.get("use", "sig") != "sig":
                continue
            try:
                loaded = jwt.PyJWK.from_dict(jwk).key
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue
            if hasattr(loaded, "public_key") and not isinstance(
                loaded, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey)
            ):
                loaded = loaded.public_key()  # a private key published by mistake
            keys[str(jwk.get("kid", f"#{index}"))] = loaded
        self._keys = keys
        self._fetched_at = time.monotonic()
        self._last_failure = None

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            answer = await self._http.get(url, headers={"Accept": "application/json"})
        except httpx.TimeoutException:
            raise IssuerUnreachable(
                f"{url} did not answer within {self.settings.fetch_timeout_seconds:g} s"
            ) from None
        except httpx.HTTPError as err:
            raise IssuerUnreachable(f"cannot reach {url}: {type(err).__name__}") from None
        if answer.status_code != 200:
            raise IssuerUnreachable(f"{url} answered {answer.status_code}")
        try:
            document = answer.json()
        except ValueError:
            raise IssuerUnreachable(f"{url} did not answer JSON") from None
        if not isinstance(document, dict):
            raise IssuerUnreachable(f"{url} did not answer a JSON object")
        return document


def _url_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith(("https://", "http://")) else None


def _b64decode(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (ValueError, TypeError) as err:
        raise ValueError(str(err)) from None
