"""Benchmarks (not tests): run them as scripts, e.g. ``.venv/bin/python bench/history_bytes.py``."""
