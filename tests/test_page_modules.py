"""The approval page's ES modules (``parley/gateway/static/*.js``) form layers: no import
circle, each module imports only from layers below it, every import names a file that
exists, every module is reached from the entry point ``index.html`` loads, and no file is
over 450 lines. Reads the files only: no server, no browser."""

from __future__ import annotations

import re
from pathlib import Path

import parley.gateway

STATIC = Path(parley.gateway.__file__).parent / "static"
ENTRY = "app.js"
MAX_LINES = 450

# The page's layers, bottom first. A module imports only from a lower layer; a view that
# must reach one above it (a click in the list opens a conversation, a 401 signs out)
# says so through the event bus (events.js) and app.js wires the listener.
LAYERS: list[set[str]] = [
    {"state.js", "events.js"},  # the shared state and constants; the event bus
    {"dom.js"},  # building nodes from untrusted text, formatting, the error banner
    {"api.js", "oidc.js"},  # the gateway's REST API; an OpenID Connect provider's sign-in
    {"refresh.js"},  # reading the snapshot and the list again
    {"transcript.js", "list.js", "inbox.js", "grants.js"},  # views that need no other view
    {"approvals.js", "stream.js", "undo.js"},  # the cards, live events, undo windows
    {"conversation.js", "auth.js"},  # opening and sending; signing in and out
    {"app.js"},  # wires the page and starts it
]

# `import x from "./y.js"`, `import {a, b} from "./y.js"` (over several lines too),
# `import "./y.js"`, `export ... from "./y.js"` and `import("./y.js")`.
IMPORT_RE = re.compile(
    r"""(?:^|[;\s])(?:import|export)\s*(?:[\w$*{}\s,]*?\bfrom\s*)?\(?\s*["']([^"']+)["']""",
    re.MULTILINE,
)


def imports_of(text: str) -> set[str]:
    """The page's modules (``./x.js`` or ``/static/x.js``) a module imports, by file name."""
    found = set()
    for target in IMPORT_RE.findall(_without_comments(text)):
        for prefix in ("./", "/static/"):
            if target.startswith(prefix):
                found.add(target[len(prefix) :])
    return found


def _without_comments(text: str) -> str:
    # Line comments only: the page writes no block comments around imports. A "//" in a
    # string (an URL) is kept: only a comment that starts a line, or follows a space.
    return re.sub(r"(^|\s)//[^\n]*", r"\1", text)


def page_graph(folder: Path = STATIC) -> dict[str, set[str]]:
    return {path.name: imports_of(path.read_text()) for path in sorted(folder.glob("*.js"))}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path (first module repeated at the end), or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node) :], node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def test_cycle_finder_finds_a_circle_and_no_false_one():
    assert find_cycle({"a.js": {"b.js"}, "b.js": {"c.js"}, "c.js": {"a.js"}}) == [
        "a.js",
        "b.js",
        "c.js",
        "a.js",
    ]
    assert find_cycle({"a.js": {"a.js"}}) == ["a.js", "a.js"]
    assert find_cycle({"a.js": {"b.js", "c.js"}, "b.js": {"c.js"}, "c.js": set()}) is None


def test_import_parser_reads_each_form():
    source = """
// import { x } from "./commented.js";
import { a,
  b } from "./one.js";
import * as two from './two.js';
import "./three.js";
export { c } from "./four.js";
const lazy = () => import("./five.js");
import { d } from "/static/absolute.js";
import { e } from "https://example.com/remote.js";
const url = "http://example.com/x.js"; // not an import
"""
    assert imports_of(source) == {
        "one.js",
        "two.js",
        "three.js",
        "four.js",
        "five.js",
        "absolute.js",
    }


def test_page_modules_import_no_circle():
    graph = page_graph()
    assert len(graph) >= 5, f"expected the page's modules in {STATIC}, found {sorted(graph)}"
    cycle = find_cycle(graph)
    assert cycle is None, "import circle in the page: " + " -> ".join(cycle or [])


def test_page_modules_import_only_from_lower_layers():
    layer_of = {name: depth for depth, names in enumerate(LAYERS) for name in names}
    graph = page_graph()
    unplaced = sorted(set(graph) - set(layer_of))
    assert not unplaced, f"place these modules in a layer of {__name__}.LAYERS: {unplaced}"
    upward = [
        f"{module} (layer {layer_of[module]}) imports {target} (layer {layer_of[target]})"
        for module, targets in graph.items()
        for target in sorted(targets)
        if target in layer_of and layer_of[target] >= layer_of[module]
    ]
    assert not upward, "imports that do not go down a layer:\n" + "\n".join(upward)


def test_every_import_exists_and_every_module_is_reached_from_the_entry():
    graph = page_graph()
    missing = sorted(
        f"{m} imports {t}" for m, targets in graph.items() for t in targets if t not in graph
    )
    assert not missing, f"imports of files that do not exist: {missing}"
    html = (STATIC / "index.html").read_text()
    assert f'<script type="module" src="/static/{ENTRY}"></script>' in html
    reached, todo = set(), [ENTRY]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.get(module, ()))
    assert reached == set(graph), f"modules nothing loads: {sorted(set(graph) - reached)}"


def test_page_files_stay_under_the_size_limit():
    sizes = {p.name: len(p.read_text().splitlines()) for p in STATIC.iterdir() if p.is_file()}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"page files over {MAX_LINES} lines: {over}"
