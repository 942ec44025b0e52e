"""What the Temporal UI shows of a conversation: search attributes and current details.
Workflow side (deterministic).

``ParleyStatus`` holds the status at rest (``awaiting_approval``, ``idle``, ``failed``,
``ended``) and ``ParleyPendingTools`` the pending tools, upserted only when they change:
each upsert is a history event, and publishing ``running`` would cost two per turn for
a state that lasts seconds. The current details (markdown, no history event) say the
live status, ``running`` included, and list the pending calls with their arguments.

``ParleyEscalatedTo`` names the people the pending calls were escalated to
(``awaiting.escalated_people``: a rule's ``escalate_to`` once the first deadline passed, or
a judge in doubt), so their inbox finds a conversation they are no member of. It is
upserted only when that set changes, under :data:`ESCALATED_TO_PUBLISHED`: a
conversation nobody escalated in issues no command more than before.
"""

from __future__ import annotations

import json

from temporalio import workflow

from parley.contracts import (
    PARLEY_ESCALATED_TO,
    PARLEY_PENDING_TOOLS,
    PARLEY_STATUS,
    PARLEY_USER,
    PREVIEW_ARGS_CHARS,
    ConversationState,
    ConversationStatus,
)
from parley.workflows.rules.awaiting import escalated_people

#: Before this patch the people calls were escalated to were not published: histories
#: recorded before it upsert no ``ParleyEscalatedTo``.
ESCALATED_TO_PUBLISHED = "escalated-to-published"


def publish_owner(state: ConversationState) -> None:
    """``ParleyUser``, unless the client already set it when it started the workflow."""
    if workflow.info().typed_search_attributes.get(PARLEY_USER) != state.user_id:
        workflow.upsert_search_attributes([PARLEY_USER.value_set(state.user_id)])


def set_status(state: ConversationState, status: ConversationStatus) -> None:
    state.status = status
    publish_status(state)


def publish_status(state: ConversationState) -> None:
    published = workflow.info().typed_search_attributes
    pending_tools = sorted({c.name for c in state.pending})
    changes = []
    if state.status != "running" and published.get(PARLEY_STATUS) != state.status:
        changes.append(PARLEY_STATUS.value_set(state.status))
    if (published.get(PARLEY_PENDING_TOOLS) or []) != pending_tools:
        changes.append(PARLEY_PENDING_TOOLS.value_set(pending_tools))
    escalated = escalated_people(state.pending)
    if (published.get(PARLEY_ESCALATED_TO) or []) != escalated and workflow.patched(
        ESCALATED_TO_PUBLISHED
    ):
        changes.append(PARLEY_ESCALATED_TO.value_set(escalated))
    if changes:
        workflow.upsert_search_attributes(changes)
    workflow.set_current_details(current_details(state))


def current_details(state: ConversationState) -> str:
    lines = [f"**Status:** {state.status}  ", f"**User:** {state.user_id}"]
    if state.instructions is not None and state.instructions.text:
        lines[-1] += "  "
        lines.append(f"**Instructions:** {state.instructions.label()}")
    if state.pending:
        lines += ["", "| tool call | tool | args | expires |", "|---|---|---|---|"]
        for c in state.pending:
            args = json.dumps(c.args, ensure_ascii=False)
            if len(args) > PREVIEW_ARGS_CHARS:
                args = args[:PREVIEW_ARGS_CHARS] + " …"
            args = args.replace("|", "\\|")
            lines.append(
                f"| `{c.tool_call_id}` | {c.name} | `{args}` | {c.expires_at.isoformat()} |"
            )
    return "\n".join(lines)
