"""The workflow modules' code, compiled once per worker process. Worker side (never
imported by workflow code).

Temporal's sandbox executes a workflow's module again for each new workflow instance (a
new conversation, or one evicted from the cache and replayed), with whatever it imports
outside ``workflow.unsafe.imports_passed_through()``: that is how it keeps each run's
module state its own and checks what the code calls. For ``ConversationWorkflow`` that
is ``parley/workflows/conversation.py`` and ``intake.py`` (the jobs they use pass
through). Each execution also loaded the module's code anew: compiled from source where
no ``.pyc`` exists (about a quarter of a new instance's CPU), else unmarshalled, a copy
of the code objects per instance. Code objects are immutable, so one copy serves every
instance: :class:`SharedCodeFinder` gives the workflow modules a loader that keeps each
module's code object after its first load. The module is still executed anew in each
sandbox, with the sandbox's restrictions; only the compiled code is shared.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import CodeType, ModuleType

#: The packages whose modules the sandbox executes for each instance.
SHARED_PACKAGES = ("parley.workflows.",)
#: Each workflow module's code object, by file: made once, read by every sandbox.
CODES: dict[str, CodeType] = {}
_LOCK = threading.Lock()


class SharedCodeLoader(importlib.machinery.SourceFileLoader):
    """``SourceFileLoader`` whose code object for a file is made once per process."""

    def get_code(self, fullname: str) -> CodeType:
        code = CODES.get(self.path)
        if code is None:
            code = super().get_code(fullname)
            assert code is not None
            with _LOCK:
                code = CODES.setdefault(self.path, code)
        return code


class SharedCodeFinder(importlib.abc.MetaPathFinder):
    """Finds a workflow module as the other finders do, with :class:`SharedCodeLoader`."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(SHARED_PACKAGES):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            loader, origin = spec.loader, spec.origin
            if type(loader) is importlib.machinery.SourceFileLoader and origin is not None:
                spec.loader = SharedCodeLoader(fullname, origin)
            return spec
        return None


def share_workflow_code() -> None:
    """From now on, workflow modules load their code once (idempotent)."""
    if not any(isinstance(finder, SharedCodeFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SharedCodeFinder())
