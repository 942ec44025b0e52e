"""The architecture holds (issue 20): the layers of ``docs/design.md`` and the arrows of
``docs/architecture.json`` that must never exist, read from the code's own imports.

Installed, ``workflows/``, ``activities/`` and ``services/`` are ``parley.workflows``,
``parley.activities`` and ``parley.services`` (setuptools ``package-dir``); this reads
``pyproject.toml`` for that mapping, so the check follows the imports a static reader
of the folders alone would miss. Module-level imports only: an import inside a function
(``subagents`` naming ``ConversationWorkflow`` for typed references) is deliberate and
cannot make an import-time circle.
"""

from __future__ import annotations

import ast
import json
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHITEBOARD = json.loads((ROOT / "docs" / "architecture.json").read_text())


def modules() -> dict[str, Path]:
    """Every importable module of the distribution, by its import name."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / folder for name, folder in setuptools["package-dir"].items()}
    found: dict[str, Path] = {}
    for name, folder in folders.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([name, *parts])] = path
    return found


def module_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it is imported (not inside functions)."""
    names: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.With | ast.If | ast.Try):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return names


def graph() -> dict[str, set[str]]:
    """File -> files it imports (paths from the root), for the distribution's modules."""
    known = modules()

    def resolve(name: str) -> str | None:
        while name:
            if name in known:
                return name
            name = name.rpartition(".")[0]
        return None

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for imported in module_level_imports(path):
            target = resolve(imported)
            if target is not None and target != name:
                edges[path.relative_to(ROOT).as_posix()].add(
                    known[target].relative_to(ROOT).as_posix()
                )
    return edges


def part_of(path: str) -> str | None:
    """The whiteboard part a file is on: the longest of its paths that holds it."""
    best, length = None, -1
    for name, part in WHITEBOARD["parts"].items():
        for prefix in part["is"]:
            held = path == prefix or (prefix.endswith("/") and path.startswith(prefix))
            if held and len(prefix) > length:
                best, length = name, len(prefix)
    return best


def test_no_import_circle() -> None:
    edges = graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}

    def walk(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node, [node])
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_no_arrow_that_must_never_exist() -> None:
    broken = []
    for source, targets in graph().items():
        for target in targets:
            pair = (part_of(source), part_of(target))
            for never in WHITEBOARD["never"]:
                if (never[0], never[1]) == pair:
                    broken.append(f"{source} -> {target}: {never[2]}")
    assert broken == [], "\n".join(broken)


def test_every_file_is_on_a_part() -> None:
    unplaced = [
        path.relative_to(ROOT).as_posix()
        for path in modules().values()
        if part_of(path.relative_to(ROOT).as_posix()) is None
    ]
    assert unplaced == []


def _is_os(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def test_workflows_and_activities_read_no_environment() -> None:
    """Configuration is read at the entry points (the worker, the gateway, the CLI):
    nothing in workflows/ or activities/ reads a variable (``os.environ[...]``,
    ``os.environ.get``, ``os.getenv``). Handing the process's environment on whole to a
    child process (``{**os.environ, ...}`` for git) reads no setting, and is allowed."""
    readers = []
    for folder in ("workflows", "activities"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            passed_on = {
                id(value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Dict)
                for key, value in zip(node.keys, node.values, strict=True)
                if key is None and _is_os(value, "environ")  # {**os.environ}
            }
            for node in ast.walk(tree):
                if (_is_os(node, "environ") and id(node) not in passed_on) or _is_os(
                    node, "getenv"
                ):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
