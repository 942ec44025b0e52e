"""Load for the liveness tests (tests/test_no_worker.py): busy loops in other processes
that saturate the machine's cores, and the script of a burst's model. Client side: the
test starts the hog and hands the script to a real ``parley worker`` process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Harmless tools (``echo``), run without confirmation, for ``PARLEY_TOOLS``.
BURST_TOOLS = "tests.support.store_tools:toolset"


@contextmanager
def cpu_hog(processes: int = 2) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``processes`` Python processes spinning in a loop (one per core of the CI
    machine) for the duration of the block; killed on the way out."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


def write_burst_script(path: Path, messages: int, calls: int) -> list[str]:
    """A script file at ``path`` whose model answers each of ``messages`` messages with
    ``calls`` ``echo`` calls, then a reply; returns the replies, in order."""
    entries: list[dict] = []
    replies = []
    for m in range(messages):
        entries.append(
            {
                "content": "",
                "tool_calls": [
                    {"name": "echo", "id": f"m{m}c{c}", "args": {"n": c}} for c in range(calls)
                ],
            }
        )
        replies.append(f"reply {m}")
        entries.append({"content": replies[-1]})
    path.write_text(json.dumps(entries))
    return replies
