"""Activities: every side effect of a conversation (model calls, tools, HTTP, git).
Worker side only; workflows call them by name (``parley.contracts.CALL_MODEL``,
``RUN_TOOL``)."""

from parley.activities.model_calls import ModelActivities
from parley.activities.tool_calls import ToolActivities

__all__ = ["ModelActivities", "ToolActivities"]
