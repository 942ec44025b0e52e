"""``python -m parley.cli``: the ``parley`` console script from a checkout or a venv."""

import sys

from parley.cli import app

sys.exit(app())
