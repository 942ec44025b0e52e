"""The reference plans service (FastAPI + SQLite) that the plans toolset talks to over
HTTP: ``parley plans-service``, and started by ``parley dev``. Not part of the worker.

``store`` keeps the plans (SQLite, idempotency, per-user rows); ``app`` serves them over
HTTP, with the test fault hooks; ``server`` runs it (foreground or in a thread).
"""

from parley.services.plans.app import create_app
from parley.services.plans.server import BackgroundServer, serve
from parley.services.plans.store import (
    DESCRIPTION_MAX,
    TITLE_MAX,
    PlanCreate,
    PlanStatus,
    PlanStatusUpdate,
    PlanStore,
)

__all__ = [
    "DESCRIPTION_MAX",
    "TITLE_MAX",
    "BackgroundServer",
    "PlanCreate",
    "PlanStatus",
    "PlanStatusUpdate",
    "PlanStore",
    "create_app",
    "serve",
]
