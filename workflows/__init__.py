"""Temporal workflows: deterministic code only (see docs/design.md, Layout).

``ConversationWorkflow`` is ``parley.workflows.conversation.ConversationWorkflow``; this
package exports nothing itself, so that the sandbox's import of any of its modules stays
small.
"""
