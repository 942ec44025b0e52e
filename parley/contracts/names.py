"""Names both sides of the Temporal boundary agree on: activity names, id rules and
the checks that apply them, the search attributes, and the vocabularies (literals).
Pure: no I/O."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from temporalio.common import SearchAttributeKey

# Activity names: shared by the workflow, the worker and the tests' fakes.
CALL_MODEL = "parley.call_model"
RUN_TOOL = "parley.run_tool"
NOTIFY = "parley.notify"
#: Validates a call's arguments and puts them in the tool's canonical form (an edit).
CANONICAL_ARGS = "parley.canonical_args"
#: Summarizes the older part of a conversation for the model (a bounded context).
COMPACT_CONTEXT = "parley.compact_context"
#: Stores audit entries older than the kept window (the audit archive).
ARCHIVE_AUDIT = "parley.archive_audit"
#: Collects the payload store's garbage (``StoreGcWorkflow``, on the worker's Schedule).
COLLECT_STORE_GARBAGE = "parley.collect_store_garbage"
#: Its name before activity names were namespaced: histories recorded then replay with
#: it (``workflow.patched``), and the worker still registers it for a sweep in flight.
COLLECT_STORE_GARBAGE_UNNAMESPACED = "collect_store_garbage"
# Parley's own AG-UI ``CUSTOM`` events: the workflow's event log writes them, the CLI,
# the page and other followers read them.
#: A decision refused after it was received (a ``decide_signal`` that no longer fits):
#: ``value`` has the error type and message.
DECISION_REFUSED_EVENT = "parley.decision_refused"
#: A streamed message that will not be completed (its model call was retried or failed).
STREAM_DISCARDED_EVENT = "parley.stream_discarded"
#: The model now sees a summary in place of the conversation's oldest messages.
COMPACTED_EVENT = "parley.compacted"
#: Queued messages joined the turn in flight (``value.messageIds``).
INTERRUPTED_EVENT = "parley.interrupted"
#: An approved call waits out its undo window (``value``: ``tool_call_id``, ``name``,
#: ``runs_at``, ``approved_by``); it runs at ``runs_at`` unless undone first.
CALL_SCHEDULED_EVENT = "parley.call_scheduled"
#: A call in its undo window was undone (``value``: ``tool_call_id``, ``name``, ``by``).
CALL_UNDONE_EVENT = "parley.call_undone"
#: The store's garbage collection workflow: what the Schedule starts by name.
STORE_GC_WORKFLOW = "ParleyStoreGc"
#: The signal by which ``call_model`` streams its reply's text to its own workflow.
STREAM_DELTA_SIGNAL = "stream_delta"
#: A conversation's workflow type, and the signals a conversation and its subagent (a
#: child conversation) send each other: a subagent is started and signalled by name.
CONVERSATION_WORKFLOW = "ConversationWorkflow"
DECIDE_SIGNAL = "decide_signal"
SUBAGENT_REPORT_SIGNAL = "subagent_report"
#: A subagent's calls in their undo window, told to its parent as the list changes; and
#: an undo the parent passes on to the subagent's conversation.
SUBAGENT_WINDOW_SIGNAL = "subagent_window"
UNDO_SIGNAL = "undo_signal"

#: Matched against the whole string (``\A``/``\Z``): ``$`` would accept "abc\n".
SESSION_ID_PATTERN = re.compile(r"\A[A-Za-z0-9._-]{1,128}\Z")
#: A user id: 1-128 characters, none of them whitespace or control characters.
USER_ID_PATTERN = re.compile(r"\A[^\s\x00-\x1f\x7f-\x9f]{1,128}\Z")
WORKFLOW_ID_PREFIX = "conversation-"
#: Assistant message ids start so, and a client's message id may not: the two never
#: collide (``m1`` from a client is never the assistant's message).
ASSISTANT_MESSAGE_PREFIX = "parley-ai-"
#: A subagent's tool-call ids start so (``sub-<name>-<n>-``); a top-level conversation's
#: never do, so a decision on one can never be taken for the other.
SUBAGENT_CALL_PREFIX = "sub-"
#: After a conversation's n-th rewind its tool-call ids start ``r<n>.``: a provider that
#: numbers its calls afresh (``call_0``) would otherwise give a call cut away and the
#: call proposed again the same id, and the second would be answered with the first's
#: decision (the same update id) and result (the same idempotency key). Ids of this shape
#: from a provider are never kept.
REWOUND_CALL_ID = re.compile(r"\Ar[0-9]+\.")
#: Joins a parent's session id and its subagent's name: a character no session id a
#: user gives may hold, so no one can start (and so block) a conversation's subagent.
SUBAGENT_SEPARATOR = "/"
SUBAGENT_SESSION_PATTERN = re.compile(
    r"\A[A-Za-z0-9._-]{1,128}" + SUBAGENT_SEPARATOR + r"[A-Za-z0-9_-]{1,64}-[0-9]{1,9}\Z"
)

ToolPolicy = Literal["auto", "confirm", "deny"]
ConversationStatus = Literal["running", "awaiting_approval", "idle", "failed", "ended"]
TurnStatus = Literal["completed", "awaiting_approval", "failed"]
ResultStatus = Literal["success", "error", "rejected", "expired"]
DecisionAction = Literal["approve", "edit", "reject", "respond"]


def workflow_id_for(session_id: str, *, subagent: bool = False) -> str:
    """The workflow id of a conversation; refuses a malformed session id. With
    ``subagent``, the id of a subagent's conversation (see :func:`subagent_session_id`)
    is accepted too; users' ids never are."""
    if subagent and isinstance(session_id, str) and SUBAGENT_SESSION_PATTERN.fullmatch(session_id):
        return WORKFLOW_ID_PREFIX + session_id
    if not isinstance(session_id, str) or not SESSION_ID_PATTERN.fullmatch(session_id):
        raise ValueError(
            f"session id {session_id!r} is not valid: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )
    return WORKFLOW_ID_PREFIX + session_id


def subagent_session_id(parent_session_id: str, name: str, number: int) -> str:
    """The session of a conversation's ``number``-th subagent, named ``name``:
    ``<parent>/<name>-<number>``. The separator is outside every session id a user may
    give, so these ids live in a namespace no user can create."""
    return f"{parent_session_id}{SUBAGENT_SEPARATOR}{name}-{number}"


def subagent_tag(workflow_id: str) -> str | None:
    """``<name>-<number>`` of a subagent's conversation, from its workflow id; None for
    a conversation a user started."""
    _, separator, tag = workflow_id.rpartition(SUBAGENT_SEPARATOR)
    return tag if separator else None


def args_hash(args: dict[str, Any]) -> str:
    """A digest of a call's canonical arguments: what a decision approved, checked
    again by the worker before the call runs."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


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
#: The people the pending calls were escalated to (no member: the gate lets them decide
#: those calls), so their inbox finds the conversation; unset while none was.
PARLEY_ESCALATED_TO = SearchAttributeKey.for_keyword_list("ParleyEscalatedTo")
SEARCH_ATTRIBUTES = (
    PARLEY_USER,
    PARLEY_STATUS,
    PARLEY_PENDING_TOOLS,
    PARLEY_REVIEWERS,
    PARLEY_ESCALATED_TO,
)
