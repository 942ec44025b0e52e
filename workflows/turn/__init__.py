"""From a message or a decision to the point where the turn rests: the ``turns`` engine
and its jobs (model calls, proposals, decisions, tool execution, streaming, failover,
spend, usage, instructions, notifications, subagents, messages while busy). Workflow
side: side effects only through activities, by name."""
