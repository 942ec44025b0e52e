"""The decision commands: ``approve``, ``reject``, ``respond`` and ``edit``, each one
``Decision`` per pending call sent through ``parley.client``; ``undo``, which takes
back approved calls still in their undo window; and ``revert``, which proposes the
inverse of a call that ran. Client side.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.cli.app import (
    AsJson,
    CallIds,
    Remember,
    Session,
    User,
    conversations,
    fail,
    out,
    print_turn,
    run_async,
)
from parley.cli.grants import RememberFor
from parley.cli.rendering import quorum_text
from parley.cli.schedule import watch_windows
from parley.client import ConversationRefused
from parley.client.reverts import revert as propose_inverse
from parley.client.reverts import undo_calls
from parley.contracts import (
    AuditEntry,
    Awaiting,
    Decision,
    DecisionAction,
    PendingCall,
    ScheduledCall,
    StateQuery,
    TurnResult,
    already_decided,
    refusal_of,
)
from parley.contracts.audit import decided_entry
from parley.contracts.errors import ErrorType

Message = Annotated[
    str | None, typer.Option("--message", "-m", help="Why you reject them (the model is told).")
]


def approve(
    session: Session,
    user: User,
    call_ids: CallIds = None,
    all_matching: Annotated[
        str | None,
        typer.Option(
            "--all-matching",
            metavar="TOOL",
            help="Approve every pending call of TOOL (a shell-style pattern).",
        ),
    ] = None,
    remember: Remember = False,
    remember_for: RememberFor = None,
    as_json: AsJson = False,
) -> None:
    """Approve pending tool calls: they run now, or, when their rule gives them an undo
    window (undo_seconds), once it is over: each such call is printed as soon as it is
    scheduled ("runs in 25 s … undo: parley undo …") and the command waits for the run."""
    decide(
        session,
        user,
        "approve",
        call_ids,
        tool_pattern=all_matching,
        remember=remember or remember_for is not None,
        remember_seconds=remember_for,
        as_json=as_json,
    )


def reject(
    session: Session,
    user: User,
    call_ids: CallIds = None,
    message: Message = None,
    remember: Remember = False,
    remember_for: RememberFor = None,
    as_json: AsJson = False,
) -> None:
    """Reject pending tool calls: they never run (optional --message with the reason)."""
    remembered = remember or remember_for is not None
    decide(
        session,
        user,
        "reject",
        call_ids,
        message=message,
        remember=remembered,
        remember_seconds=remember_for,
        as_json=as_json,
    )


def respond(
    session: Session,
    user: User,
    message: Annotated[str, typer.Option("--message", "-m", help="The answer to give the model.")],
    call_ids: CallIds = None,
    as_json: AsJson = False,
) -> None:
    """Answer pending tool calls yourself (--message): the tool does not run."""
    if not message.strip():
        raise fail("respond needs --message with the answer to give the model")
    decide(session, user, "respond", call_ids, message=message, as_json=as_json)


def edit(
    session: Session,
    user: User,
    args: Annotated[str, typer.Option("--args", help="The new arguments, a JSON object.")],
    call_id: Annotated[
        str | None,
        typer.Argument(help="The tool call to edit; optional when only one is pending."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Run a pending tool call with new arguments (--args JSON)."""
    new_args = parse_args_option(args)
    decide(session, user, "edit", [call_id] if call_id else None, args=new_args, as_json=as_json)


def decide(
    session: str,
    user: str,
    action: DecisionAction,
    call_ids: list[str] | None,
    *,
    message: str | None = None,
    args: dict[str, Any] | None = None,
    tool_pattern: str | None = None,
    remember: bool = False,
    remember_seconds: int | None = None,
    as_json: bool,
) -> None:
    if tool_pattern is not None and call_ids:
        raise fail("give CALL_IDs or --all-matching TOOL, not both")

    async def work() -> tuple[TurnResult, list[Awaiting] | None] | str:
        conv = await conversations(session, user)
        pending: list[PendingCall] = []
        audit: list[AuditEntry] = []
        try:
            state = await conv.state(session, user)
        except ConversationRefused as refusal:
            # Named calls need no reading: with no worker the decision is sent anyway,
            # and Temporal keeps it until one returns (the client's decide says so).
            if refusal.error_type != ErrorType.NO_WORKER or not call_ids or tool_pattern:
                raise
        else:
            if state.status == "ended":
                raise ConversationRefused(
                    f"conversation {session} has ended; its calls will never run",
                    ErrorType.CONVERSATION_ENDED,
                )
            pending, audit = state.pending, state.audit
        if (
            call_ids
            and not as_json
            and (repeated := repeat_of(call_ids, pending, audit, user, action))
        ):
            return repeated
        if tool_pattern is not None:
            pending = [p for p in pending if fnmatch.fnmatchcase(p.name, tool_pattern)]
            if not pending:
                raise ConversationRefused(
                    f"no pending call in {session} is of a tool matching {tool_pattern!r}"
                )
        ids = call_ids or [p.tool_call_id for p in pending]
        if not ids:
            raise ConversationRefused(f"no tool call waits for a decision in {session}")
        if action == "edit" and len(ids) > 1:
            raise ConversationRefused(
                f"edit needs one CALL_ID when {len(ids)} calls are pending: {', '.join(ids)}"
            )
        # The arguments each was decided on, when read here: a stale decision is
        # refused, and a call whose arguments changed is never answered by an old one.
        # An approval is also of the preview read here (``parley show`` prints the same):
        # one that changed since refuses it.
        seen = {p.tool_call_id: p.args_hash or None for p in pending}
        shown = {p.tool_call_id: p.preview.hash for p in pending if p.preview is not None}
        decisions = [
            Decision(
                tool_call_id=i,
                action=action,
                args=args,
                message=message,
                remember=remember,
                remember_seconds=remember_seconds,
                args_hash=seen.get(i),
                preview_hash=shown.get(i) if action == "approve" else None,
            )
            for i in ids
        ]
        # Calls whose rule gives them an undo window: the decision answers only after it,
        # so each is printed as soon as it is scheduled (how to undo it, meanwhile).
        windowed = [] if as_json else [p.tool_call_id for p in pending if p.undo_seconds]
        result = await watch_windows(
            conv,
            session,
            user,
            [i for i in windowed if i in ids and action in ("approve", "edit")],
            lambda: conv.decide(session, user, decisions),
            out,
        )
        left = [p for p in pending if p.tool_call_id in ids and result.left_waiting(p)]
        if left:  # refused on the way (by a subagent): say so, never "decided"
            after = await conv.state(session, user)
            raise ConversationRefused(not_applied(left, after.audit), ErrorType.INVALID_DECISION)
        if not result.pending or as_json:
            return result, None
        # Who the calls still wait for, as this user reads it (a quorum's approver
        # is not told to approve again).
        return result, (
            await conv.state(session, user, StateQuery(user_id=user, audit_limit=0))
        ).awaiting

    outcome = run_async(work)
    if isinstance(outcome, str):  # this very decision was taken before: nothing to do
        out.print(Text(outcome))
        return
    result, awaiting = outcome
    print_turn(result, as_json, session, user, awaiting=awaiting)


def undo(
    session: Session,
    user: User,
    call_ids: Annotated[
        list[str] | None,
        typer.Option(
            "--call",
            "-c",
            metavar="CALL_ID",
            help="A call to undo (repeatable); none: every call you may undo.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Take back approved calls still in their undo window (a rule's undo_seconds): they
    never run, and the model is told who undid them. Only the call's approver or the
    conversation's owner may; a call that already ran (or has no window) is refused.
    parley show lists the calls in their window."""

    async def work() -> tuple[list[str], list[ScheduledCall]]:
        conv = await conversations(session, user)
        waiting = (await conv.state(session, user)).scheduled
        return (await conv.undo(session, user, undo_calls(call_ids or ()))).undone, waiting

    undone, waiting = run_async(work)
    if as_json:
        print(json.dumps({"undone": undone}, indent=2))
        return
    names = {s.tool_call_id: s.name for s in waiting}
    for call_id in undone:
        name = f" {names[call_id]}" if call_id in names else ""
        out.print(Text(f"undone: {call_id}{name} will not run (the model is told)"))


def revert(
    session: Session,
    user: User,
    call_id: Annotated[
        str, typer.Option("--call", "-c", metavar="CALL_ID", help="The call that ran.")
    ],
    as_json: AsJson = False,
) -> None:
    """Take back a call that ran by its tool's declared inverse (create_plan: delete the
    plan): Parley proposes it (call id revert-CALL_ID) and the gate sorts it like any
    call, so it usually waits for its own approval. A call whose tool declares no
    inverse, that did not run successfully, or that was reverted already is refused."""

    async def work() -> TurnResult:
        conv = await conversations(session, user)
        return await propose_inverse(conv, session, user, call_id)

    print_turn(run_async(work), as_json, session, user)


def repeat_of(
    call_ids: list[str],
    pending: list[PendingCall],
    audit: list[AuditEntry],
    user: str,
    action: DecisionAction,
) -> str | None:
    """ "call-1 already decided by bob at …: approved" when every named call was already
    decided by ``user`` with ``action`` (the same command again); None otherwise (a
    different decision on a decided call is sent: the gate refuses it, saying so)."""
    waiting = {p.tool_call_id: p for p in pending}
    lines = []
    for call_id in call_ids:
        call = waiting.get(call_id)
        if call is not None:  # a quorum's call this user approved already waits on
            given = next((a for a in call.approvals if a.by == user), None)
            if action != "approve" or given is None:
                return None
            lines.append(
                f"{call_id} already approved by {user} at {given.at:%Y-%m-%d %H:%M} UTC: "
                f"{quorum_text(call)}; it runs once enough other reviewers approve"
            )
            continue
        entry = decided_entry(audit, call_id)
        if entry is None or entry.actor != user or entry.detail.get("action") != action:
            return None
        lines.append(already_decided(audit, call_id) or "")
    return "\n".join(lines)


def not_applied(calls: list[PendingCall], audit: list[AuditEntry]) -> str:
    """One line: the decisions on ``calls`` were not applied, and why, so nobody reads
    "decided" for a call that still waits."""
    why = refusal_of(audit, {c.tool_call_id for c in calls})
    reason = f" ({why})" if why else ""
    names = ", ".join(c.tool_call_id for c in calls)
    return f"not decided{reason}: {names} still waiting for a decision"


def parse_args_option(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as problem:
        raise fail(f"--args is not JSON: {problem.msg} at character {problem.pos}") from None
    if not isinstance(value, dict):
        raise fail('--args must be a JSON object, e.g. \'{"branch_slug": "my-change"}\'')
    return value
