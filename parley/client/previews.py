"""A pending call's preview (``ToolPreview``) as lines a person reads: what ``parley
show``, ``parley chat`` and the signed approval link's page print under the call. Client
side (never imported by workflows); plain text, the caller escapes it for HTML. The
approval page's cards render it the same way (``previewLines`` in
``parley/gateway/static/dom.js``): change both together.

The data is the tool's JSON: a dict's keys and values one per line (a nested dict
indented under its key), a list as short bullet lines (a dict in a list on one line,
``key: value, …``), a long text cut with a note of how much more there was. A failed
preview says so, with its error; a refused one ("the call cannot succeed") comes first
and in capitals, so nobody approves it unaware.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from parley.contracts.previews import ToolPreview

#: A text value is cut past this many characters (a bullet line too).
TEXT_CHARS = 200
#: A list shows its first items, then how many more.
LIST_ITEMS = 20

LineKind = Literal["head", "refused", "failed", "note", "data"]


@dataclass(frozen=True)
class PreviewLine:
    """One line: its text (indented by two spaces a level) and what it is, for a style."""

    text: str
    kind: LineKind = "data"


def preview_lines(preview: ToolPreview) -> list[PreviewLine]:
    """The preview as lines: a heading ("preview:", "preview: REFUSED <why>" or
    "preview: could not be computed (<error>)"), then its data."""
    if preview.status == "failed":
        return [PreviewLine(f"preview: {preview.summary()}", "failed")]
    refused = preview.refused
    head = (
        PreviewLine(f"preview: REFUSED {refused}", "refused")
        if refused
        else PreviewLine("preview:", "head")
    )
    lines = [head]
    if preview.truncated:
        size = f"{preview.data_bytes:,} bytes" if preview.data_bytes else "more"
        lines.append(PreviewLine(f"  (cut: its JSON is {size}; the beginning shown)", "note"))
    data = preview.data
    if isinstance(data, dict):
        shown = {k: v for k, v in data.items() if not (refused and k == "refused")}
        lines += [PreviewLine(text) for text in _dict_lines(shown, 1)]
    else:
        lines += [PreviewLine(text) for text in _value_lines(data, 1)]
    return lines


def preview_text(preview: ToolPreview) -> str:
    """The lines of :func:`preview_lines`, joined."""
    return "\n".join(line.text for line in preview_lines(preview))


def _dict_lines(data: dict[str, Any], depth: int) -> list[str]:
    pad = "  " * depth
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:")
            lines += _dict_lines(value, depth + 1)
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{key}:")
            lines += _list_lines(value, depth + 1)
        else:
            lines.append(f"{pad}{key}: {scalar_text(value)}")
    return lines


def _list_lines(items: list[Any], depth: int) -> list[str]:
    pad = "  " * depth
    lines = [f"{pad}- {_cut(_inline(item))}" for item in items[:LIST_ITEMS]]
    if len(items) > LIST_ITEMS:
        lines.append(f"{pad}… and {len(items) - LIST_ITEMS} more")
    return lines


def _value_lines(value: Any, depth: int) -> list[str]:
    if isinstance(value, dict) and value:
        return _dict_lines(value, depth)
    if isinstance(value, list) and value:
        return _list_lines(value, depth)
    return ["  " * depth + scalar_text(value)]


def _inline(value: Any) -> str:
    """A list's item on one line: a dict as ``key: value, …``."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_inline_scalar(v)}" for k, v in value.items())
    return _inline_scalar(value)


def _inline_scalar(value: Any) -> str:
    if isinstance(value, dict | list):
        return _json(value) if value else "(none)"
    return _flat(value)


def scalar_text(value: Any) -> str:
    """A value on its key's line: text cut to ``TEXT_CHARS``, "(none)" for nothing."""
    if isinstance(value, dict | list):
        return "(none)" if not value else _cut(_json(value))
    return _cut(_flat(value))


def _json(value: Any) -> str:
    """Compact, as the page's ``JSON.stringify`` writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _flat(value: Any) -> str:
    if value is None:
        return "(none)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ↵ ".join(str(value).splitlines()) if isinstance(value, str) else str(value)


def _cut(text: str) -> str:
    if len(text) <= TEXT_CHARS:
        return text
    return f"{text[:TEXT_CHARS]}… ({len(text) - TEXT_CHARS:,} more characters)"
