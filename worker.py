"""Runs Parley's worker from a checkout: ``python worker.py`` is ``parley worker``, the
same command with the same checks. A bad configuration (an unknown PARLEY_TOOLS, a
model that cannot load, an unreachable Temporal) is one ``error:`` line and exit code 1,
never a traceback. Client side: the wiring (the client, the worker, its workflows and
activities) is ``parley.worker.wiring``; the checks and the one-line errors are ``parley.cli``.

The top-level folders of this repository are installed as ``parley.workflows``,
``parley.activities`` and ``parley.services``, so installing Parley never puts generic
names such as ``workflows`` into site-packages.
"""

import sys

from parley.cli import app

if __name__ == "__main__":
    # Options after ``worker.py`` (only --help today) are the worker command's; its help
    # names the command it is.
    app(["worker", *sys.argv[1:]], prog_name="parley")
