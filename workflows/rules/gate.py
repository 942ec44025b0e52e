"""The gate: pure checks of a message or a set of decisions against the conversation's
state. Workflow side (deterministic: no I/O, no clock; the caller passes ``now``), imported
through the sandbox by ``workflows/conversation.py``.

``ConversationWorkflow``'s validators and handlers call these, so a refused call never
enters history; ``tests/test_gate.py`` calls them without a server. Each refusal is
one of ``parley.contracts.errors.Refusal``'s classes (a non-retryable ``ApplicationError`` with a
stable ``type``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from parley.contracts import (
    ASSISTANT_MESSAGE_PREFIX,
    SPEND_CALL,
    WORKFLOW_ID_PREFIX,
    ConversationState,
    DecideInput,
    PendingCall,
    SendMessageInput,
    SubagentTask,
    ToolCatalogue,
    already_decided,
)
from parley.contracts.busy import QUEUED_MESSAGES_MAX, WhileBusy
from parley.contracts.errors import (
    NOT_OWNER_MESSAGE,
    ConversationEnded,
    DecisionsOwed,
    InvalidDecision,
    InvalidMessage,
    MessageTooLarge,
    NoDecisionsOwed,
    NotOwner,
    Refusal,
    TurnInProgress,
)
from parley.workflows.rules.membership import as_seen_by

Input = TypeVar("Input", bound=BaseModel)


def parse(model: type[Input], raw: Any, refusal: type[Refusal]) -> Input:
    """An update's input, read from what the caller sent: anything that does not fit
    (a key the model does not define included) is ``refusal``, non-retryable, with one
    line per problem; never a converter failure that Temporal would call retryable."""
    if isinstance(raw, model):
        return raw
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise refusal(f"{model.__name__} refused: {describe(err)}") from None


def describe(err: ValidationError) -> str:
    """A validation error as one line: ``decisions.0.mesage: Extra inputs are not
    permitted; ...`` (no documentation links)."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}"
        for e in err.errors(include_url=False)
    )


def check_owner(state: ConversationState, user_id: str) -> None:
    if user_id != state.user_id:
        raise NotOwner(NOT_OWNER_MESSAGE)


def is_member(state: ConversationState, user_id: str) -> bool:
    return user_id == state.user_id or user_id in state.reviewers


def check_member(state: ConversationState, user_id: str, groups: Sequence[str] = ()) -> None:
    """The owner or one of the conversation's reviewers (a member of a reviewer group
    too, ``membership``): they may read it and decide on its calls (only the owner
    sends messages and ends it)."""
    if not is_member(as_seen_by(state, user_id, groups), user_id):
        raise NotOwner(NOT_OWNER_MESSAGE)


def escalated_to(state: ConversationState, user_id: str) -> set[str]:
    """The calls escalated to ``user_id`` (their rule's ``escalate_to``, once their first
    deadline passed): waiting now, or recorded ``escalated`` in the kept audit log."""
    ids = {
        call.tool_call_id
        for call in state.pending
        if call.on_timeout is not None
        and call.on_timeout.escalated
        and call.on_timeout.escalate_to == user_id
    }
    ids |= {
        entry.tool_call_id
        for entry in state.audit.entries
        if entry.event == "escalated" and entry.tool_call_id and entry.detail.get("to") == user_id
    }
    return ids


def check_reader(
    state: ConversationState, user_id: str, groups: Sequence[str] = ()
) -> set[str] | None:
    """Who may read the conversation: a member (a reviewer group's too) reads all of it
    (None); the person a call was escalated to reads those calls only (their ids);
    anyone else is refused."""
    if is_member(as_seen_by(state, user_id, groups), user_id):
        return None
    escalated = escalated_to(state, user_id)
    if not escalated:
        raise NotOwner(NOT_OWNER_MESSAGE)
    return escalated


def may_review(state: ConversationState, call: PendingCall, user_id: str) -> bool:
    """Whether ``user_id`` counts as a reviewer of ``call``: one of the conversation's
    reviewers, or the person the call was escalated to; never its requester."""
    if user_id == state.user_id:
        return False
    timeout = call.on_timeout
    escalated = timeout is not None and timeout.escalated and timeout.escalate_to == user_id
    return user_id in state.reviewers or escalated


def approve_refusals(state: ConversationState, call: PendingCall, user_id: str) -> list[str]:
    """Why ``user_id``'s approve of ``call`` would be refused by its rule (a reviewer
    rule's requester; a quorum's reviewer approving twice); none: it would be taken.
    ``workflows.awaiting`` asks it too, so every surface offers what the gate takes."""
    problems = []
    if call.reviewer_rule and not may_review(state, call, user_id):
        problems.append(
            f"rule `{call.reviewer_rule}` requires a reviewer other than the requester "
            f"to approve {call.tool_call_id}"
        )
    given_by = [a.by for a in call.approvals]
    if call.approvals_needed > 1 and user_id in given_by:
        problems.append(
            f"{user_id} already approved {call.tool_call_id} ({len(given_by)} of "
            f"{call.approvals_needed} approvals, by {', '.join(given_by)}); another "
            "reviewer must approve it"
        )
    return problems


def check_open(state: ConversationState) -> None:
    if state.ended:
        raise ConversationEnded("this conversation has ended")
    if state.turn_running:
        raise TurnInProgress("a turn is still running in this conversation; wait for its result")


def check_message(
    state: ConversationState,
    message: SendMessageInput,
    max_bytes: int,
    *,
    subagent: SubagentTask | None = None,
    while_busy: WhileBusy = "reject",
) -> bool:
    """A chat message may start a turn: the owner's, not empty, not too large, no
    decision owed (a chat message never approves a tool call), and not to a subagent's
    conversation (``subagent``: its task), which takes only its task. True: it is to
    wait for a turn (``while_busy`` enqueue or interrupt while the conversation is busy
    with a turn or queued messages; ``parley.workflows.turn.busy``), within the queue's bound."""
    check_owner(state, message.user_id)
    if subagent is not None:
        parent = subagent.parent_workflow_id.removeprefix(WORKFLOW_ID_PREFIX)
        raise InvalidMessage(
            f"this is subagent {subagent.name}'s conversation, working on a task for "
            f"conversation {parent}; it takes no messages. Write to {parent} instead."
        )
    waits = while_busy != "reject" and (state.turn_running or bool(state.queued_messages))
    if state.turn_running and not waits and not state.ended:
        raise TurnInProgress(
            "a turn is still running in this conversation; wait for its result, or send "
            "the message with while_busy enqueue (it becomes the next turn) or interrupt "
            "(the model's answer in progress is stopped and the message joins the turn)"
        )
    if state.ended or not waits:
        check_open(state)
    if not message.text.strip() and not message.tool_results:
        raise InvalidMessage("the message is empty")
    if message.message_id.startswith(ASSISTANT_MESSAGE_PREFIX):
        raise InvalidMessage(
            f"message ids starting with {ASSISTANT_MESSAGE_PREFIX!r} are the assistant's; "
            "choose another message id"
        )
    size = len(message.text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise MessageTooLarge(
            f"the message is {size:,} bytes; this conversation takes at most "
            f"{max_bytes:,} bytes per message. Send a shorter message, or share a large "
            "text as a file a tool can read."
        )
    if waits:
        if message.tool_results:
            raise TurnInProgress(
                "tool results answer the calls of the turn that made them and cannot wait "
                "for a turn; send them once the turn in flight is done"
            )
        if len(state.queued_messages) >= QUEUED_MESSAGES_MAX:
            raise TurnInProgress(
                f"{len(state.queued_messages)} messages already wait for a turn in this "
                f"conversation (at most {QUEUED_MESSAGES_MAX}); send this one once a "
                "turn is done"
            )
        return True
    if state.pending:
        ids = ", ".join(f"{c.tool_call_id} ({c.name})" for c in state.pending)
        raise DecisionsOwed(
            f"{len(state.pending)} tool call(s) wait for your decision: {ids}. "
            "Approve, edit, reject or respond to them first; a chat message never "
            "approves a tool call."
        )
    if state.queued_messages:
        raise TurnInProgress(
            f"{len(state.queued_messages)} queued message(s) wait for their turn in this "
            "conversation; wait for their result, or send with while_busy enqueue"
        )
    return False


def as_decider_sees_it(state: ConversationState, decision: DecideInput) -> ConversationState:
    """The state with the decider among the reviewers when one of their verified groups
    (``DecideInput.groups``) is a reviewer ``group:<name>``: a group member counts as
    that reviewer, for this decision only (``membership.as_seen_by``)."""
    return as_seen_by(state, decision.decided_by, decision.groups)


def check_decider(state: ConversationState, decision: DecideInput) -> None:
    """A member decides any call; the person a call was escalated to, only that call."""
    state = as_decider_sees_it(state, decision)
    escalated = check_reader(state, decision.decided_by)
    if escalated is None:
        return
    others = [d.tool_call_id for d in decision.decisions if d.tool_call_id not in escalated]
    if others:
        raise InvalidDecision(
            f"decision refused: {decision.decided_by} may decide only the calls escalated "
            f"to them ({', '.join(sorted(escalated))}), not {', '.join(others)}"
        )
    if any(d.remember for d in decision.decisions):  # it would decide later calls too
        raise InvalidDecision(
            f"decision refused: {decision.decided_by} decides the calls escalated to them, "
            "one by one; remember is for the conversation's owner and reviewers"
        )


def expired_calls(pending: list[PendingCall], now: datetime) -> list[PendingCall]:
    return [call for call in pending if call.expires_at <= now]


#: Under this patch a handler refuses ``remember`` on a call a reviewer rule holds.
REMEMBER_UNDER_REVIEW = "remember-under-review-refused"


def check_decisions(
    state: ConversationState, decision: DecideInput, now: datetime, *, reviewed: bool = True
) -> None:
    """A decision for one or more pending calls (the calls it does not name keep
    waiting), each named once, no unknown or expired ids, edited args that fit the
    tool's schema (no keys it does not name, unless it opts in). The person a call was
    escalated to decides that call, and nothing else. With ``reviewed`` (a handler:
    ``REMEMBER_UNDER_REVIEW`` patched), no ``remember`` on a call a reviewer rule holds:
    the rules decide first, so its grant would never apply."""
    state = as_decider_sees_it(state, decision)
    check_decider(state, decision)
    # A call past its deadline is expired even if the timer has not fired yet (the
    # decision and the timer may arrive in the same workflow task): never run it. One
    # the timer already answered says so too, even while that answer's turn runs.
    expired = {call.tool_call_id for call in expired_calls(state.pending, now)}
    expired |= {
        a.tool_call_id for a in state.audit.entries if a.event == "expired" and a.tool_call_id
    }
    given_ids = {d.tool_call_id for d in decision.decisions}
    if state.turn_running and not state.ended and given_ids and given_ids <= expired:
        raise InvalidDecision(
            f"decision refused: expired, will not run: {', '.join(sorted(given_ids))}"
        )
    check_open(state)
    pending = {c.tool_call_id: c for c in state.pending if c.tool_call_id not in expired}
    if not pending:
        decided = [already_decided(state.audit.entries, i) for i in sorted(given_ids - expired)]
        message = "; ".join(t for t in decided if t) or "no tool call waits for a decision"
        if expired:
            message += f"; {', '.join(sorted(expired))} expired and will not run"
        raise NoDecisionsOwed(message)
    given = [d.tool_call_id for d in decision.decisions]
    problems: list[str] = []
    if len(given) != len(set(given)):
        problems.append("a tool call is decided more than once")
    late = [i for i in given if i in expired]
    if late:
        problems.append(f"expired, will not run: {', '.join(late)}")
    unknown = [i for i in given if i not in pending and i not in expired]
    problems += [t for i in unknown if (t := already_decided(state.audit.entries, i))]
    if unknown := [i for i in unknown if not already_decided(state.audit.entries, i)]:
        problems.append(f"unknown or no longer pending: {', '.join(unknown)}")
    if not given:
        problems.append("no tool call is named")
    if decision.link is not None and len(given) != 1:
        problems.append("a decision by link names exactly one call")
    # Said only when the set of ids is what is wrong.
    waiting = ", ".join(pending)
    hint = f" The calls that wait: {waiting}." if problems else ""
    catalogue = state.tools or ToolCatalogue(tools=[])
    for d in decision.decisions:
        if d.remember and d.action not in ("approve", "reject"):
            problems.append(
                f"only approve and reject can be remembered ({d.tool_call_id} is {d.action}): "
                "a remembered edit would run later calls with args nobody saw"
            )
        call = pending.get(d.tool_call_id)
        if reviewed and d.remember and call is not None and call.reviewer_rule is not None:
            problems.append(
                f"{d.tool_call_id} cannot be remembered: rule `{call.reviewer_rule}` has a "
                "reviewer decide each of its calls, so a remembered decision would never "
                "apply; decide it without remember"
            )
        if call is not None and call.name == SPEND_CALL:
            if d.action not in ("approve", "reject") or d.remember:
                problems.append(
                    f"{d.tool_call_id} asks whether the conversation may go on spending: "
                    "approve or reject it (it cannot be remembered)"
                )
            continue
        if call is not None and d.args_hash is not None and d.args_hash != call.args_hash:
            problems.append(
                f"the arguments of {d.tool_call_id} are no longer the ones you decided on "
                f"(args_hash {d.args_hash}, now {call.args_hash}); read the call again"
            )
        if call is not None and d.preview_hash is not None and call.preview is not None:
            if d.preview_hash != call.preview.hash:
                problems.append(
                    f"the preview of {d.tool_call_id} is no longer the one you decided on "
                    f"(preview_hash {d.preview_hash}, now {call.preview.hash}); read the call "
                    "again"
                )
        # An edit is a new proposal: the rules judge it.
        if call is not None and d.action == "approve":
            problems += approve_refusals(state, call, decision.decided_by)
        if d.action == "edit" and d.tool_call_id in pending:
            error = args_error(catalogue, pending[d.tool_call_id].name, d.args or {})
            if error:
                problems.append(f"edited args for {d.tool_call_id} are invalid: {error}")
    if problems:
        raise InvalidDecision("decision refused: " + "; ".join(problems) + "." + hint)


def args_error(catalogue: ToolCatalogue, tool_name: str, args: dict[str, Any]) -> str | None:
    """Why ``args`` do not fit the tool's schema, or None when they do. Arguments the
    schema does not name are refused unless the tool opts in."""
    spec = catalogue.get(tool_name)
    if spec is None:
        return f"unknown tool {tool_name!r}"
    return spec.args_error(args)


#: A client's run id (AG-UI ``runId``): what a UUID or a slug needs, nothing that could
#: break a log line.
CLIENT_RUN_ID = re.compile(r"\A[A-Za-z0-9._:-]{1,128}\Z")


def used_run_ids(state: ConversationState) -> set[str]:
    """The run ids of the runs the event log keeps and of the messages waiting."""
    started = {e.get("runId") for e in state.events.entries if e.get("type") == "RUN_STARTED"}
    return {r for r in started | {q.run_id for q in state.queued_messages} if r}


def run_id_for(state: ConversationState, requested: str | None) -> str:
    """The id of the run starting now: the client's (the gate refused one used before;
    a decision kept as a signal was not checked, so it is checked here), else
    ``run-<n>``, unless a client already gave one of the log's runs that id (then
    ``run-<n>.<k>``)."""
    used = used_run_ids(state)
    if requested and requested not in used:
        return requested
    run_id, k = f"run-{state.runs}", 1
    while run_id in used:
        run_id, k = f"run-{state.runs}.{k}", k + 1
    return run_id


def check_client_run(
    state: ConversationState,
    request: SendMessageInput | DecideInput,
    max_bytes: int,
    refusal: type[Refusal],
) -> None:
    """What a front end gives a run. Its id names one run: well formed, and used by no
    run the event log keeps nor by a message waiting for a turn (a reused id would make
    two runs one in every client's eyes). Its context fits in a message. Its tools have
    names of their own: none of the worker's tools or subagents (a call of it would look
    gated and not be), none twice. Its tool results answer waiting calls of its tools."""
    run_id, context = request.run_id, request.context
    names = [tool.name for tool in request.client_tools]
    worker_tools = {spec.name for spec in state.tools.tools} if state.tools else set()
    if taken := sorted((set(names) & worker_tools) | {n for n in names if names.count(n) > 1}):
        raise refusal(
            f"front-end tool {', '.join(taken)}: a tool of that name is Parley's own, or "
            "is given twice; name the front end's tools apart"
        )
    if isinstance(request, SendMessageInput):
        check_tool_results(state, request)
    if run_id is not None:
        if not CLIENT_RUN_ID.fullmatch(run_id):
            raise refusal(
                f"run id {run_id[:140]!r} is not one a client may give: use 1-128 letters, "
                "digits and . _ : - (a UUID will do)"
            )
        if run_id in used_run_ids(state):
            raise refusal(
                f"run id {run_id!r} was already used in this conversation; give each run "
                "a new id (a retried request is answered by its message id or its "
                "decisions, whatever its run id)"
            )
    # Everything a request carries beside its message enters history (and every model
    # call's input) as it is: bounded together like a message.
    results = [r.content for r in getattr(request, "tool_results", [])]
    tools = [json.dumps(t.model_dump(), default=str) for t in request.client_tools]
    decided = [
        f"{d.message or ''}{json.dumps(d.args, default=str) if d.args else ''}"
        for d in getattr(request, "decisions", [])
    ]
    parts = [*(f"{c.description}{c.value}" for c in context), *results, *tools, *decided]
    size = sum(len(part.encode(errors="surrogatepass")) for part in parts)
    if size > max_bytes:
        raise MessageTooLarge(
            f"the run's context, front-end tools, tool results and decisions are {size:,} "
            f"bytes; a request takes at most {max_bytes:,} bytes of them. Send less of the "
            "application's state, or a shorter answer."
        )


def check_tool_results(state: ConversationState, message: SendMessageInput) -> None:
    """Each result answers a call of a front-end tool that waits for one, once."""
    waiting = {call.tool_call_id for call in state.client_calls}
    given = [result.tool_call_id for result in message.tool_results]
    if wrong := sorted({i for i in given if i not in waiting or given.count(i) > 1}):
        expected = ", ".join(sorted(waiting)) or "none"
        raise InvalidMessage(
            f"tool result for {', '.join(wrong)}: no call of a front-end tool waits for "
            f"it (or it is given twice); the calls waiting are: {expected}"
        )
