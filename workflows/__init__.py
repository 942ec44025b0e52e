"""Temporal workflows: deterministic code only (see design.md, Layout)."""
