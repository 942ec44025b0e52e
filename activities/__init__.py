"""Activities: every side effect of a conversation (model calls, tools, HTTP, git)."""
