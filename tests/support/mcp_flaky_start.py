"""A stdio MCP server command for ``tests/test_mcp_git.py`` whose next start fails while a
marker file exists: ``mcp_flaky_start.py <marker> <starts log> <mcp-server-git args>``.

Each start is logged (``failed`` or ``started``) to the starts log. A start that finds
the marker removes it and exits 1 before speaking MCP, as a server whose command
cannot start would; any other start becomes the published ``mcp-server-git``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

marker, starts, *server_args = sys.argv[1:]
try:
    Path(marker).unlink()
    failing = True
except FileNotFoundError:
    failing = False
with Path(starts).open("a", encoding="utf-8") as log:
    log.write("failed\n" if failing else "started\n")
if failing:
    print("mcp_flaky_start: this start fails on purpose", file=sys.stderr)
    sys.exit(1)
os.execv(sys.executable, [sys.executable, "-m", "mcp_server_git", *server_args])
