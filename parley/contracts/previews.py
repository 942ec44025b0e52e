"""Previews and inverse calls: what a call would change before it runs, and the call
that takes it back after. Both sides import this module (the workflow shows a
:class:`ToolPreview` with a pending call, and its hash is part of what a decision
approves), so it holds pydantic models, an activity name and pure helpers: no I/O.

A tool declares both beside its policy (``parley.tools.declarations``):

- ``preview(args, context) -> dict``: reads the target, never changes it. Its JSON is
  bounded like a result's payload (:data:`PAYLOAD_PREVIEW_BYTES`); the hash is always of
  the whole of it, so a change past the cut still changes the hash.
- ``compensate(args, result_payload) -> InverseCall | None``: the call that undoes a run
  (another registered tool and its arguments), or None when that run changed nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from parley.contracts.limits import PAYLOAD_PREVIEW_BYTES, utf8_prefix
from parley.contracts.payloads import Contract

#: Runs a tool's preview (``activities.previews``): shared by the workflow, the worker
#: and the tests.
PREVIEW_CALL = "parley.preview_call"

PreviewStatus = Literal["ok", "failed"]


def preview_hash(data: Any) -> str:
    """A digest of a preview's data, in the form of ``args_hash``: sha256 of its canonical
    JSON (sorted keys, no spaces), 16 hex."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


class ToolPreview(Contract):
    """What a call would change, as its tool's preview computed it (``status="ok"``), or
    why the preview could not be computed (``"failed"``: shown, never blocking)."""

    status: PreviewStatus
    #: The preview's JSON; over ``PAYLOAD_PREVIEW_BYTES`` it is the beginning of that
    #: JSON as text, and ``truncated`` is set. None for a failed preview.
    data: Any = None
    truncated: bool = False
    #: The size of the whole data (JSON bytes), when ``data`` was cut.
    data_bytes: int | None = None
    #: One line: why the preview failed (redacted, no traceback), and its error type
    #: (``ErrorType``: ``ToolTransientError`` may be worth another try).
    error: str | None = None
    error_type: str | None = None
    #: :func:`preview_hash` of the whole data (of None for a failed preview): a decision
    #: approves it with the arguments, so a target that moved on changes it.
    hash: str
    #: The digest of the arguments it is a preview of (``args_hash``), when known.
    args_hash: str | None = None

    @classmethod
    def of(cls, data: Any, *, args_hash: str | None = None) -> ToolPreview:
        """A successful preview of ``data`` (JSON), cut to its bound."""
        text = json.dumps(data, ensure_ascii=False, default=str)
        size = len(text.encode("utf-8", errors="surrogatepass"))
        digest = preview_hash(data)
        if size <= PAYLOAD_PREVIEW_BYTES:
            return cls(status="ok", data=data, hash=digest, args_hash=args_hash)
        return cls(
            status="ok",
            data=utf8_prefix(text, PAYLOAD_PREVIEW_BYTES),
            truncated=True,
            data_bytes=size,
            hash=digest,
            args_hash=args_hash,
        )

    @classmethod
    def failed(
        cls, error: str, error_type: str | None = None, *, args_hash: str | None = None
    ) -> ToolPreview:
        """A preview that could not be computed: ``error`` is made one line."""
        line = " ".join(error.split()) or "the preview failed"
        return cls(
            status="failed",
            error=line[:500],
            error_type=error_type,
            hash=preview_hash(None),
            args_hash=args_hash,
        )

    def summary(self, chars: int = 300) -> str:
        """One line for a message or a card's caption: why it failed, else its data as
        compact JSON, cut to ``chars``."""
        if self.status == "failed":
            return f"could not be computed ({self.error or 'no reason given'})"
        if self.refused is not None:
            return f"refused: {self.refused}"
        text = (
            self.data
            if isinstance(self.data, str)
            else json.dumps(self.data, ensure_ascii=False, separators=(", ", ": "), default=str)
        )
        return text if len(text) <= chars else text[: chars - 1] + "…"

    @property
    def refused(self) -> str | None:
        """Why the call cannot succeed, when its preview says so (``{"refused": ...}``)."""
        if self.status == "ok" and isinstance(self.data, dict):
            reason = self.data.get("refused")
            return reason if isinstance(reason, str) else None
        return None


class InverseCall(Contract):
    """The call that undoes one that ran: a registered tool's name and its arguments
    (in that tool's canonical form once the registry has seen them)."""

    name: str
    args: dict[str, Any]


class PreviewCallInput(Contract):
    """``preview_call``: one pending call whose preview to compute. The tool's
    ``ToolContext`` is built from these (the workflow id is the session's)."""

    name: str
    #: The call's canonical arguments and their digest (``args_hash``): a preview of any
    #: other arguments is refused as a failed preview.
    args: dict[str, Any]
    args_hash: str
    tool_call_id: str
    user_id: str
    session_id: str
    #: Set in a subagent's conversation: only the tools that subagent may use.
    subagent: str | None = None
