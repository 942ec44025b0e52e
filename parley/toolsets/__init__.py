"""Toolsets Parley ships: load one with ``PARLEY_TOOLS=parley.toolsets.<name>:toolset``."""
