"""Signed one-time approval links, for channels that cannot carry a bearer token (Slack,
email, a pager). Both sides of the Temporal boundary, no I/O: the worker's ``notify``
activity makes them, the gateway's ``/links`` routes check them.

A link names one decision: the conversation, the call, the arguments' digest
(``args_hash``), the user it is for, the action (approve or reject) and an expiry (the
call's deadline). It is HMAC-SHA256-signed with ``PARLEY_LINK_SECRET``, so nothing in it
can be changed, and its id is the digest of what it names: the same call, arguments,
user and action always make the same link, and a decision made with it is audited with
that id (``detail.link``), which is how the gateway knows it was used. It is refused
when the signature does not hold, when it expired, when the call's arguments are no
longer the ones it names, and once it was used.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

LinkAction = Literal["approve", "reject"]


class LinkRefused(Exception):
    """A link that cannot decide: ``status`` (403 forged, 410 expired) and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ApprovalLink(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str
    tool_call_id: str
    args_hash: str
    user_id: str
    action: LinkAction
    #: Seconds since the epoch (UTC) after which the link decides nothing.
    expires: int

    @property
    def link_id(self) -> str:
        """The link's identity: the digest of what it names."""
        return hashlib.sha256(self._payload()).hexdigest()[:24]

    def expires_at(self) -> datetime:
        return datetime.fromtimestamp(self.expires, UTC)

    def _payload(self) -> bytes:
        return json.dumps(self.model_dump(), sort_keys=True, separators=(",", ":")).encode()

    def sign(self, secret: str) -> str:
        """The link's token: the payload and its signature, both base64url."""
        payload = self._payload()
        return f"{_b64(payload)}.{_b64(_mac(secret, payload))}"


def verify(token: str, secret: str, now: datetime) -> ApprovalLink:
    """The link a token names, if its signature holds and it has not expired."""
    payload_part, _, signature_part = token.partition(".")
    try:
        payload, signature = _unb64(payload_part), _unb64(signature_part)
    except ValueError:
        raise LinkRefused(403, "this link is not one Parley made (it is cut or changed)") from None
    if not hmac.compare_digest(signature, _mac(secret, payload)):
        raise LinkRefused(403, "this link is not one Parley made (its signature does not hold)")
    try:
        link = ApprovalLink.model_validate_json(payload)
    except ValidationError:
        raise LinkRefused(403, "this link is not one Parley made") from None
    if now >= link.expires_at():
        raise LinkRefused(
            410, f"this link expired at {link.expires_at():%Y-%m-%d %H:%M} UTC, with the call"
        )
    return link


def _mac(secret: str, payload: bytes) -> bytes:
    return hmac.new(secret.encode(), payload, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text:
        raise ValueError("empty")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as err:
        raise ValueError(str(err)) from None
