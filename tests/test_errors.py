"""Every error type is named once, in ``parley.contracts.errors.ErrorType``: no other
source file writes one as a string literal, and no two names share a value."""

from __future__ import annotations

import re
from pathlib import Path

from parley.contracts.errors import ErrorType

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    path
    for folder in ("parley", "activities", "workflows")
    for path in sorted((ROOT / folder).rglob("*.py"))
    if path != ROOT / "parley" / "contracts" / "errors.py"
] + [ROOT / "worker.py"]

#: A keyword that takes an error type, given a literal string.
TYPE_KEYWORD = re.compile(r"\b(?:type|error_type|code)\s*=\s*[\"'][A-Z]\w*[\"']")


def error_type_values() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(ErrorType).items()
        if name.isupper() and isinstance(value, str)
    }


def test_error_type_values_are_unique() -> None:
    values = list(error_type_values().values())
    assert len(values) == len(set(values))


def test_no_error_type_is_written_outside_error_type() -> None:
    values = set(error_type_values().values())
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), start=1):
            literals = set(re.findall(r"[\"']([A-Z][A-Za-z]+)[\"']", line))
            if literals & values or TYPE_KEYWORD.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
