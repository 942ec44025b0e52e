"""The gateway's OpenID Connect settings (``PARLEY_OIDC_*``), read by the gateway only.
Client side (the gateway); kept out of ``parley.config.settings.Settings``, which workers and
every command read, since nothing else needs them.

- ``PARLEY_OIDC_ISSUER``: the provider (discovery at
  ``<issuer>/.well-known/openid-configuration``); unset, the gateway takes only the
  tokens file. ``https://``, or ``http://`` to a loopback address (a local issuer).
- ``PARLEY_OIDC_AUDIENCE``: what a token's ``aud`` must hold (required with an issuer).
- ``PARLEY_OIDC_USER_CLAIM`` (``sub``): the claim that is the user id.
- ``PARLEY_OIDC_GROUPS_CLAIM`` (``groups``): the claim that lists the user's groups; a
  conversation reviewer ``group:<name>`` is any user of that group.
- ``PARLEY_OIDC_CLIENT_ID`` and ``PARLEY_OIDC_SCOPES`` (``openid profile``): the page's
  sign-in (a public client: authorization code with PKCE); no client id, no sign-in
  button (bearer tokens from elsewhere still work).
- ``PARLEY_OIDC_LEEWAY_SECONDS`` (30): clock skew allowed for ``exp`` and ``nbf``.
- ``PARLEY_OIDC_JWKS_REFRESH_SECONDS`` (60): at most one key fetch per this long for a
  token whose key id is unknown (an attacker sending made-up ids cannot make the gateway
  fetch on every request).
- ``PARLEY_OIDC_JWKS_MAX_AGE_SECONDS`` (3600): keys are fetched again this long after the
  last fetch, so a key the issuer withdrew stops working.

A bad value is one line (``OidcSettingsError``, a ``ValueError``) naming the variable.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from parley.contracts import check_user_id
from parley.contracts.reviewers import GROUP_PREFIX

ENV_PREFIX = "PARLEY_OIDC_"


class OidcSettingsError(ValueError):
    """A ``PARLEY_OIDC_*`` value that cannot work: one line, naming the variable."""


class OidcSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    issuer: str | None = None
    audience: str | None = None
    user_claim: str = Field(default="sub", min_length=1, max_length=128)
    groups_claim: str = Field(default="groups", min_length=1, max_length=128)
    client_id: str | None = None
    scopes: str = "openid profile"
    leeway_seconds: float = Field(default=30.0, ge=0, le=600)
    jwks_refresh_seconds: float = Field(default=60.0, ge=0, le=86_400)
    jwks_max_age_seconds: float = Field(default=3600.0, gt=0, le=7 * 86_400)
    #: How long one discovery or key fetch may take.
    fetch_timeout_seconds: float = Field(default=5.0, gt=0, le=60)

    @field_validator("issuer", "audience", "client_id", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{value[:120]!r} is not an https URL")
        if parts.query or parts.fragment:
            raise ValueError("an issuer URL has no query or fragment")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ValueError("use https (plain http only for an issuer on a loopback address)")
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: str) -> str:
        scopes = value.split()
        if "openid" not in scopes:
            raise ValueError("the scopes must include 'openid'")
        return " ".join(scopes)

    @model_validator(mode="after")
    def _consistent(self) -> OidcSettings:
        if self.issuer and not self.audience:
            raise ValueError(
                "PARLEY_OIDC_AUDIENCE is not set: set it to the audience the provider puts "
                "in tokens for this gateway (often the client id)"
            )
        if self.client_id and not self.issuer:
            raise ValueError("PARLEY_OIDC_CLIENT_ID is set but PARLEY_OIDC_ISSUER is not")
        return self

    @property
    def enabled(self) -> bool:
        return self.issuer is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OidcSettings:
        """The settings from ``env`` (the process's environment at the gateway's start);
        a bad value is one ``OidcSettingsError`` line."""
        values = {
            key[len(ENV_PREFIX) :].lower(): value
            for key, value in env.items()
            if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX) :].lower() in cls.model_fields
        }
        try:
            return cls(_env_file=None, **values)  # type: ignore[call-arg]
        except ValidationError as err:
            raise OidcSettingsError(describe(err)) from None


def describe(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if not where:
        return message
    return f"{ENV_PREFIX}{where.upper()}: {message}"


def checked_groups(value: object, limit: int = 64) -> tuple[str, ...]:
    """The groups of a token's groups claim: a list of names (or one name); names that
    could not be a reviewer's are left out; at most ``limit``."""
    names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    groups: list[str] = []
    for name in names:
        if not isinstance(name, str):
            continue
        try:
            check_user_id(GROUP_PREFIX + name)
        except ValueError:
            continue
        if name not in groups:
            groups.append(name)
    return tuple(sorted(groups[:limit]))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
