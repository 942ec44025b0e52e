"""The README read by the tests that run it as written: a section's fenced blocks, and
the variables a shell block exports. Client side (test support)."""

from __future__ import annotations

import re
import shlex

from tests.support.processes import ROOT

README = ROOT / "README.md"


def section(title: str) -> str:
    """The text under the heading ``title`` (any level), up to the next heading of the
    same or a higher level; fails if the README has no such heading."""
    lines = README.read_text(encoding="utf-8").splitlines()
    fenced = False
    start = level = None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"^(#+) (.*)$", line)
        if heading is None:
            continue
        depth = len(heading.group(1))
        if start is None and heading.group(2).strip() == title:
            start, level = number + 1, depth
        elif start is not None and level is not None and depth <= level:
            return "\n".join(lines[start:number])
    assert start is not None, f"README.md has no heading {title!r}"
    return "\n".join(lines[start:])


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``text``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def exports(block: str) -> dict[str, str]:
    """``NAME: value`` of each ``export NAME=value`` line of a shell block (comments
    dropped, quotes removed as the shell would)."""
    found: dict[str, str] = {}
    for line in block.splitlines():
        if line.startswith("export "):
            words = shlex.split(line[len("export ") :], comments=True)
            name, _, value = words[0].partition("=")
            found[name] = value
    return found


def commands(block: str) -> list[str]:
    """The lines of a shell block that are neither exports nor comments."""
    return [
        line.strip()
        for line in block.splitlines()
        if line.strip() and not line.startswith(("export ", "#"))
    ]
