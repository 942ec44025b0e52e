"""The architecture holds: the layers of ``docs/design.md`` and the arrows of
``docs/architecture.json`` that must never exist, read from the code's own imports.

Installed, ``workflows/``, ``activities/`` and ``services/`` are ``parley.workflows``,
``parley.activities`` and ``parley.services`` (setuptools ``package-dir``); this reads
``pyproject.toml`` for that mapping, so the check follows the imports a static reader
of the folders alone would miss.

Every import statement counts, at any depth: at module level, under ``if``/``try``/
``with``, in a class body, and inside functions and methods (an import deferred into a
function still makes the two modules depend on each other, and hides a circle from a
reader; ``test_no_deferred_import`` allows only the few listed with their reason). What
is not an import statement is not counted: the worker loading user code by reference
(``importlib.import_module`` of ``PARLEY_TOOLS``' and ``PARLEY_MODEL``'s factories).

An import under ``if TYPE_CHECKING:`` never executes: it names a type for the type
checker only. It counts for the arrows that must never exist (a part that names another
part's types depends on it), but not for circles: a circle through a type-only import is
no circle at import time or at run time, so such an import is the one way a module may
name a type of a module that imports it.
"""

from __future__ import annotations

import ast
import json
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHITEBOARD = json.loads((ROOT / "docs" / "architecture.json").read_text())

#: The only imports deferred into a function, by file and imported module (that module
#: or one under it), each with its reason: an optional or heavy dependency loaded on
#: demand, so a process that never needs it never pays for it.
DEFERRED_ALLOWED: dict[tuple[str, str], str] = {
    ("parley/cli/servers.py", "parley.cli.dev"): "`parley dev` alone starts a whole stack",
    ("parley/cli/servers.py", "parley.gateway"): "FastAPI, uvicorn and the OpenID Connect "
    "verifier (about a second) load for `parley gateway` only, never for `parley send`",
    ("parley/cli/servers.py", "parley.services.plans"): "the reference service's FastAPI "
    "app and SQLite load for `parley plans-service` only",
    ("parley/cli/servers.py", "parley.worker.wiring"): "the worker's toolsets, models and "
    "SDK worker load for `parley worker` only",
    ("parley/cli/servers.py", "parley.activities.http"): "the worker's shared HTTP client, "
    "for `parley worker` only",
    ("parley/observability/tracing.py", "opentelemetry"): "the OpenTelemetry SDK, OTLP "
    "exporter and FastAPI instrumentation load only when traces are on",
    ("parley/observability/tracing.py", "temporalio.contrib.opentelemetry"): "the SDK's "
    "tracing plugin, only when traces are on",
    ("parley/storage/stores.py", "parley.storage.s3"): "boto3 and aioboto3 load only for "
    "an s3:// payload store",
    ("activities/toolsets/mcp.py", "langchain_mcp_adapters"): "the MCP adapter and SDK "
    "load only when an MCP toolset lists its tools",
    ("activities/models/__init__.py", "parley.activities.models"): "a model's module loads "
    "when PARLEY_MODEL names its kind: a provider's SDK (langchain-openai, -anthropic, "
    "-google-genai) only on a worker that uses it",
}

#: Where no class is assembled from mixins: the client, its surfaces and the gateway.
NO_MIXINS = ("parley/client", "parley/cli", "parley/gateway")


@cache
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


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Import:
    """One import statement's module (and the names it imports from it, as modules)."""

    names: frozenset[str]
    line: int
    in_function: bool
    type_only: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path) -> list[Import]:
    """Every import statement of ``path`` (the module ``module``), at any depth."""
    found: list[Import] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            else:
                base = node.module or ""
                if node.level:  # relative: from the package, ``level - 1`` up
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                names = {base, *(f"{base}.{a.name}" for a in node.names)}
            found.append(Import(frozenset(names), node.lineno, in_function, type_only))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, in_function, True)
            for child in node.orelse:
                visit(child, in_function, type_only)
            return
        deeper = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            visit(child, deeper, type_only)

    visit(ast.parse(path.read_text()), False, False)
    return found


def resolve(name: str) -> str | None:
    """The distribution's module ``name`` is, or is in (None: not Parley's)."""
    known = modules()
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def graph(*, type_only: bool = True) -> dict[str, set[str]]:
    """File -> files it imports (paths from the root), for the distribution's modules;
    without ``type_only``, the imports under ``if TYPE_CHECKING:`` are left out."""
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for statement in imports(name, path):
            if statement.type_only and not type_only:
                continue
            for imported in statement.names:
                target = resolve(imported)
                if target is not None and target != name:
                    edges[rel(path)].add(rel(known[target]))
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
    """No module imports, at any depth and through any chain, a module that imports it
    back (imports inside functions count; type-only imports do not)."""
    edges = graph(type_only=False)
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


def test_imports_inside_functions_are_counted(tmp_path: Path) -> None:
    """The import reader sees an import however deep it is, and tells a deferred one and
    a type-only one from the others."""
    source = tmp_path / "sample.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import parley.contracts\n"
        "if TYPE_CHECKING:\n"
        "    from parley.client import Conversations\n"
        "class Holder:\n"
        "    def method(self):\n"
        "        def inner():\n"
        "            from parley.cli.app import app\n"
    )
    found = {min(i.names, key=len): i for i in imports("sample", source)}
    assert set(found) == {"typing", "parley.contracts", "parley.client", "parley.cli.app"}
    assert found["parley.cli.app"].in_function and not found["parley.cli.app"].type_only
    assert found["parley.client"].type_only and not found["parley.client"].in_function
    assert not found["parley.contracts"].in_function


def test_no_deferred_import() -> None:
    """parley/, workflows/ and activities/ import at module level: an import inside a
    function is one of ``DEFERRED_ALLOWED``'s, each a dependency loaded on demand for a
    reason it states (never to dodge an import circle), and each of those is still used."""
    deferred, used = [], set()
    for name, path in modules().items():
        if not rel(path).startswith(("parley/", "workflows/", "activities/")):
            continue
        for statement in imports(name, path):
            if not statement.in_function or statement.type_only:
                continue
            module = min(statement.names, key=len)
            allowed = [
                (file, prefix)
                for file, prefix in DEFERRED_ALLOWED
                if file == rel(path) and (module == prefix or module.startswith(prefix + "."))
            ]
            used.update(allowed)
            if not allowed:
                deferred.append(f"{rel(path)}:{statement.line} imports {module}")
    assert deferred == [], "imports inside functions:\n" + "\n".join(deferred)
    assert set(DEFERRED_ALLOWED) - used == set(), "allowed but no longer deferred"


@cache
def _names(module: str) -> tuple[frozenset[str], dict[str, str]]:
    """The classes ``module`` defines, and the names it imports from Parley's modules
    (local name -> the dotted name it is, ``module.name``)."""
    tree = ast.parse(modules()[module].read_text())
    classes = frozenset(n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and resolve(node.module):
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if resolve(alias.name):
                    imported[alias.asname or alias.name] = alias.name
    return classes, imported


def own_class(module: str, dotted: str, hops: int = 5) -> bool:
    """Whether ``dotted`` (a name as ``module`` writes it: ``Name``, ``alias.Name``) is a
    class of Parley's own, followed through re-exports (``parley.client``'s)."""
    head, _, rest = dotted.partition(".")
    classes, imported = _names(module)
    if not rest and head in classes:
        return True
    if head not in imported or hops == 0:
        return False
    full = ".".join([imported[head], *([rest] if rest else [])])
    owner, _, name = full.rpartition(".")
    target = resolve(owner)
    return target is not None and own_class(target, name, hops - 1)


def test_no_class_is_assembled_from_mixins() -> None:
    """In the client, the CLI and the gateway a class has at most one base of Parley's
    own: what it needs of another of Parley's classes it holds (composition), it is not
    assembled from halves (mixins)."""
    assembled = []
    for name, path in modules().items():
        if not rel(path).startswith(NO_MIXINS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [
                    ast.unparse(b) for b in node.bases if isinstance(b, ast.Name | ast.Attribute)
                ]
                own = [base for base in bases if own_class(name, base)]
                if len(own) > 1:
                    assembled.append(f"{rel(path)}: {node.name}({', '.join(own)})")
    assert assembled == [], "classes assembled from mixins:\n" + "\n".join(assembled)


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


#: The most lines a room may hold: past it, it has several jobs and is split by job.
MAX_LINES = 450


def test_no_file_is_over_the_size_of_one_room() -> None:
    """Every module of the distribution, the top-level scripts, the benchmarks and the
    tests' own modules stay under ``MAX_LINES`` (the page's modules: test_page_modules)."""
    files = [*modules().values(), *ROOT.glob("*.py"), *ROOT.glob("bench/*.py")]
    files += [*ROOT.glob("tests/*.py"), *ROOT.glob("tests/support/*.py")]
    over = {
        path.relative_to(ROOT).as_posix(): count
        for path in files
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert over == {}, f"over {MAX_LINES} lines: {over}"


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


def test_each_part_of_the_conversation_state_has_one_writer() -> None:
    """Each part of ``ConversationState`` (a field whose type is a pydantic model, and
    each list) is changed from exactly one module of ``workflows/``: assigned, augmented,
    deleted, item-assigned or changed in place (``append``, ``pop``...), read from the
    code (``tests/support/state_writers``). Every other module changes it through that
    one's methods."""
    from tests.support.state_writers import parts, writers

    written = writers(ROOT / "workflows")
    shared = {part: sorted(modules) for part, modules in written.items() if len(modules) != 1}
    assert shared == {}, "parts of the state written from more than one module"
    # Every part but the reviewers (set when the conversation starts) has its writer: a
    # part the reading misses fails here, not silently.
    assert set(written) == set(parts()) - {"reviewers"}
