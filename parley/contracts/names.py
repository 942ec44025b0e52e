"""Names both sides of the Temporal boundary agree on: activity names, id rules and
the checks that apply them, the search attributes, and the vocabularies (literals).
Pure: no I/O."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from temporalio.common import SearchAttributeKey

# Activity names: shared by the workflow, the worker and the tests' fakes.
CALL_MODEL = "parley.call_model"
RUN_TOOL = "parley.run_tool"
NOTIFY = "parley.notify"

#: Matched against the whole string (``\A``/``\Z``): ``$`` would accept "abc\n".
SESSION_ID_PATTERN = re.compile(r"\A[A-Za-z0-9._-]{1,128}\Z")
#: A user id: 1-128 characters, none of them whitespace or control characters.
USER_ID_PATTERN = re.compile(r"\A[^\s\x00-\x1f\x7f-\x9f]{1,128}\Z")
WORKFLOW_ID_PREFIX = "conversation-"

ToolPolicy = Literal["auto", "confirm", "deny"]
ConversationStatus = Literal["running", "awaiting_approval", "idle", "failed", "ended"]
TurnStatus = Literal["completed", "awaiting_approval", "failed"]
ResultStatus = Literal["success", "error", "rejected", "expired"]
DecisionAction = Literal["approve", "edit", "reject", "respond"]


def workflow_id_for(session_id: str) -> str:
    """The workflow id of a conversation; refuses a malformed session id."""
    if not isinstance(session_id, str) or not SESSION_ID_PATTERN.fullmatch(session_id):
        raise ValueError(
            f"session id {session_id!r} is not valid: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )
    return WORKFLOW_ID_PREFIX + session_id


def subagent_session_id(parent_session_id: str, name: str, number: int) -> str:
    """The session of a conversation's ``number``-th subagent, named ``name``:
    ``<parent>.<name>-<number>``, cut (with a digest of the parent's, so two parents
    never share it) when that would be longer than a session id may be."""
    suffix = f".{name}-{number}"
    session = parent_session_id + suffix
    if len(session) > 128:
        digest = hashlib.sha256(parent_session_id.encode()).hexdigest()[:12]
        session = f"{parent_session_id[: 128 - len(suffix) - 13]}-{digest}{suffix}"
    return session


def check_user_id(user_id: str | None) -> str:
    """The user id every conversation needs; empty or ``default`` is refused (F8)."""
    if user_id is None or not user_id.strip():
        raise ValueError("a user id is required (pass --user or user_id)")
    if not USER_ID_PATTERN.fullmatch(user_id):
        raise ValueError(
            f"user id {user_id[:40]!r} is not valid: use 1-128 characters with no spaces "
            "or control characters"
        )
    if user_id.lower() == "default":
        raise ValueError("'default' is not a user id: pass the real user's id")
    return user_id


def call_summary(name: str, args: dict[str, Any], limit: int = 120) -> str:
    """One line naming a tool call, e.g. ``git_push_branch repo_alias=web branch=feat/x``."""
    parts = [name]
    for key, value in args.items():
        if isinstance(value, str | int | float | bool):
            text = str(value).replace("\n", " ")
            parts.append(f"{key}={text[:40]}")
    return " ".join(parts)[:limit]


PARLEY_USER = SearchAttributeKey.for_keyword("ParleyUser")
PARLEY_STATUS = SearchAttributeKey.for_keyword("ParleyStatus")
PARLEY_PENDING_TOOLS = SearchAttributeKey.for_keyword_list("ParleyPendingTools")
#: The users besides the owner who may read the conversation and decide on its calls.
PARLEY_REVIEWERS = SearchAttributeKey.for_keyword_list("ParleyReviewers")
SEARCH_ATTRIBUTES = (PARLEY_USER, PARLEY_STATUS, PARLEY_PENDING_TOOLS, PARLEY_REVIEWERS)
