"""Toolsets Parley ships. Activity side: load one with
``PARLEY_TOOLS=parley.activities.toolsets.<name>:toolset``."""
