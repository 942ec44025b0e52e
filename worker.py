"""Runs Parley's worker from a checkout: ``python worker.py`` (what ``parley worker``
does once installed). The wiring (the client, the worker, its workflows and activities)
is ``parley.worker``: the top-level folders of this repository are installed as
``parley.workflows``, ``parley.activities`` and ``parley.services``, so installing Parley
never puts generic names such as ``workflows`` into site-packages.
"""

from parley.worker import main

if __name__ == "__main__":
    main()
