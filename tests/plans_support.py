"""Moved to ``tests.support.plans``; kept while tests owned by others still import
``tests.plans_support`` (remove it when none does)."""

from tests.support.plans import PLANS_KEY, plans_registry

__all__ = ["PLANS_KEY", "plans_registry"]
