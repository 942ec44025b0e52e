"""How the command line and ``parley chat`` print turns, pending calls, conversations,
the list of conversations and the worker's tools. Client side; plain text, never Rich
markup for what users or models wrote.

Every message is printed whole; a tool result once (not again when the next reply
quotes it whole); pending calls' arguments as indented JSON, never cut at any width,
and under them the call's preview, what it would change (``parley.client.previews``).

The reply as it streams is ``parley.cli.live_reply``'s.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from langchain_core.messages import AnyMessage
from rich.console import Console
from rich.text import Text

from parley.cli.schedule import print_scheduled
from parley.client.previews import preview_lines
from parley.contracts import (
    SPEND_CALL,
    Awaiting,
    ConversationSnapshot,
    PendingCall,
    ToolCatalogue,
    ToolPreview,
    TurnResult,
    Usage,
)

if TYPE_CHECKING:
    from parley.client import ConversationSummary


def _quoted_whole(content: str, reply: str | None) -> bool:
    """Whether ``reply`` repeats ``content`` whole (as the offline model does): then the
    content is printed once, in the reply."""
    return reply is not None and len(content) >= 16 and content in reply


def result_label(status: str, payload: object) -> str:
    """How a tool result's outcome is named: its status, except that a call a person
    answered with ``respond`` is "responded" (the workflow records it with the status
    ``rejected``, since the tool did not run, and the decision in its payload)."""
    if isinstance(payload, dict) and payload.get("decision") == "respond":
        return "responded"
    return status


def _label_style(label: str) -> str:
    return "green" if label in ("success", "responded") else "yellow"


def render_turn(result: TurnResult, console: Console, *, reply_streamed: bool = False) -> None:
    """A turn's tool results (each once), then the reply (not again when it was just
    streamed whole to the same console, ``LiveReply``), after a line naming a change of
    model (``notice``: a failover, or back after its cool-down)."""
    if result.notice:
        console.print(Text(f"({result.notice})", style="dim"))
    for item in result.results:
        label = result_label(item.status, item.payload)
        line = Text.assemble(
            (label, _label_style(label)),
            f" {item.name} ({item.tool_call_id})",
        )
        if item.content and not _quoted_whole(item.content, result.reply):
            line.append(f": {item.content}")
        console.print(line)
        if item.judged is not None:
            console.print(Text(f"    ({item.judged.label()})", style="dim"))
    if result.reply and not reply_streamed:
        console.print(Text(result.reply))


def print_pending(
    pending: Sequence[PendingCall],
    console: Console,
    *,
    session: str | None = None,
    user: str | None = None,
    awaiting: Sequence[Awaiting] | None = None,
) -> None:
    """Each pending call with its whole arguments (indented JSON: a long value is never
    cut, whatever the terminal's width), who it waits for, and how to decide: the hint
    names only what ``user`` may do (``awaiting``, the gate's view for that reader)."""
    if not pending:
        return
    views = {view.tool_call_id: view for view in awaiting or []}
    mine = [c for c in pending if c.tool_call_id not in views or views[c.tool_call_id].may_approve]
    title = "Waiting for your decision:" if mine else "Waiting for a decision:"
    console.print(Text(title, style="bold yellow"))
    for call in pending:
        print_call(call, console)
        if call.tool_call_id in views:
            console.print(Text(f"    ({views[call.tool_call_id].text})", style="dim"))
    if session is None or user is None:
        return
    who = f"--session {shlex.quote(session)} --user {shlex.quote(user)}"
    spend = all(c.name == SPEND_CALL for c in pending)  # approve or reject, nothing else
    if mine:
        verbs = "approve|reject" if spend else "approve|edit|reject|respond"
        # A bare command decides every pending call: named when some are not theirs.
        ids = " ".join(shlex.quote(c.tool_call_id) for c in mine)
        ids = "[CALL_ID…]" if len(mine) == len(pending) else ids
        console.print(Text(f"Decide with: parley {verbs} {who} {ids}"))
    if others := [c for c in pending if c not in mine and views[c.tool_call_id].may_decide]:
        ids = " ".join(shlex.quote(c.tool_call_id) for c in others)
        verbs = "reject" if spend else "reject|respond"
        console.print(Text(f"You may reject: parley {verbs} {who} {ids}"))


def print_call(call: PendingCall, console: Console) -> None:
    expires = f"expires {call.expires_at:%Y-%m-%d %H:%M} UTC"
    if call.name == SPEND_CALL:  # not a tool: may the conversation go on spending?
        used, mark = int(call.args["total_tokens"]), int(call.args["mark"])
        console.print(
            Text.assemble(
                "  ",
                ("spend approval", "bold"),
                f" ({call.tool_call_id}), {expires}: {used:,} tokens used, past the mark "
                f"of {mark:,}",
            )
        )
        console.print(Text(f"    {call.description}"))
        return
    console.print(
        Text.assemble(
            "  ",
            (call.name, "bold"),
            f" ({call.tool_call_id}), {expires}, with:",
        )
    )
    args = json.dumps(call.args, ensure_ascii=False, indent=2, default=str)
    console.print(Text("\n".join("    " + line for line in args.splitlines())))
    if call.preview is not None:
        print_preview(call.preview, console)
    if call.reason:
        console.print(Text(f"    (needs approval: {call.reason})", style="dim"))
    if call.judged is not None:
        console.print(Text(f"    ({call.judged.label()})", style="dim"))
    if call.subagent is not None:
        console.print(
            Text(
                f"    (asked by subagent {call.subagent.name}, in {call.subagent.session_id})",
                style="dim",
            )
        )
    if call.approvals_needed > 1:
        console.print(Text(f"    ({quorum_text(call)})", style="dim"))
    if call.undo_seconds:
        console.print(
            Text(
                f"    (once approved it waits {call.undo_seconds} s before it runs, and may be "
                "undone meanwhile: parley undo)",
                style="dim",
            )
        )


#: How each kind of a preview's line looks (``parley.client.previews``).
_PREVIEW_STYLES = {"head": "bold", "refused": "bold red", "failed": "yellow", "note": "dim"}


def print_preview(preview: ToolPreview, console: Console) -> None:
    """What the call would change, under its arguments: a refused one in bold red."""
    for line in preview_lines(preview):
        console.print(Text("    " + line.text, style=_PREVIEW_STYLES.get(line.kind, "")))


def quorum_text(call: PendingCall) -> str:
    """ "1 of 2 approvals: bob", for a call under a rule's quorum."""
    given = [approval.by for approval in call.approvals]
    count = f"{len(given)} of {call.approvals_needed} approvals"
    return f"{count}: {', '.join(given)}" if given else f"{count}, by reviewers"


def print_snapshot(
    snapshot: ConversationSnapshot,
    console: Console,
    *,
    audit: bool,
    hint: bool,
    user: str | None = None,
) -> None:
    """A conversation: status, a page of the transcript (each message whole, each tool
    result once), the audit log if asked, the pending calls (the hint for ``user``, the
    reader, by default the owner) and the approved calls in their undo window."""
    console.print(
        Text.assemble(
            (snapshot.session_id, "bold"), f" ({snapshot.user_id}): status {snapshot.status}"
        )
    )
    console.print(Text(usage_line(snapshot.usage), style="dim"))
    first, total = snapshot.transcript_offset, snapshot.transcript_total
    if first > 0 or first + len(snapshot.transcript) < total:
        console.print(
            Text(
                f"messages {first + 1}-{first + len(snapshot.transcript)} of {total} "
                "(numbered from 1, as fork --at and rewind --to count); page with parley "
                "show --offset N (skips the first N) --limit N",
                style="dim",
            )
        )
    reader = (snapshot.session_id, user or snapshot.user_id)
    print_messages(snapshot.transcript, console, first=first + 1, reader=reader)
    if audit:
        print_audit(snapshot, console)
    print_pending(
        snapshot.pending,
        console,
        session=snapshot.session_id if hint else None,
        user=(user or snapshot.user_id) if hint else None,
        awaiting=snapshot.awaiting,
    )
    print_scheduled(
        snapshot.scheduled,
        console,
        session=snapshot.session_id if hint else None,
        user=(user or snapshot.user_id) if hint else None,
        owner=snapshot.user_id,
    )


def usage_line(usage: Usage) -> str:
    """The conversation's token usage on one line."""
    if not usage.model_calls:
        return "usage: no model calls yet"
    calls = f"{usage.model_calls} model call{'' if usage.model_calls == 1 else 's'}"
    estimate = ""
    if usage.estimated_calls:  # the offline model counts about four characters a token
        some = "" if usage.estimated_calls == usage.model_calls else " in part"
        estimate = f", estimated{some} (the offline model reports no real usage)"
    # Prompt caching's savings: input tokens the provider read from its cache.
    cached = usage.cache_read_tokens
    cache = f", {cached:,} of them read from the prompt cache" if cached else ""
    # Several models (PARLEY_MODEL lists them, and the conversation failed over): each's.
    each = [
        f"{name} {part.total_tokens:,} tokens over {part.model_calls}"
        for name, part in (usage.by_model or {}).items()
    ]
    by_model = f"; by model: {', '.join(each)}" if each else ""
    return (
        f"usage: {usage.total_tokens:,} tokens ({usage.input_tokens:,} in{cache}, "
        f"{usage.output_tokens:,} out) over {calls}{estimate}{by_model}"
    )


def _label(kind: str, number: str = "") -> tuple[str, str]:
    return (f"{number}{kind:>6} ", "dim")


def whole_result_hint(message: AnyMessage, reader: tuple[str, str] | None) -> str:
    """How to read a result whole that the model (and so the transcript) has cut."""
    stored = getattr(message, "artifact", {})["stored"]
    chars = stored.get("content_chars") or 0
    call = shlex.quote(str(getattr(message, "tool_call_id", "")))
    who = "--session S --user U"
    if reader is not None:
        who = f"--session {shlex.quote(reader[0])} --user {shlex.quote(reader[1])}"
    return (
        f"(the whole result, {chars:,} characters, is kept: parley result {who} --call "
        f"{call} [--output FILE])"
    )


def print_messages(
    messages: Sequence[AnyMessage],
    console: Console,
    *,
    first: int | None = None,
    reader: tuple[str, str] | None = None,
) -> None:
    """Each message whole, numbered from ``first`` (the transcript's numbering, from 1,
    which ``fork --at`` and ``rewind --to`` count in) when given; a result kept whole
    apart from what the model read says how to get it (``reader``: session and user)."""
    width = len(str(first + len(messages) - 1)) if first is not None else 0
    for index, message in enumerate(messages):
        number = f"{first + index:>{width}}" if first is not None else ""
        text = message.text
        if message.type == "tool":
            artifact = getattr(message, "artifact", None)
            status = (artifact or {}).get("status") if isinstance(artifact, dict) else None
            status = status or getattr(message, "status", "")
            if isinstance(artifact, dict):
                status = result_label(status, artifact.get("payload"))
            line = Text.assemble(
                _label("tool", number),
                f"{getattr(message, 'name', None) or 'tool'} "
                f"({getattr(message, 'tool_call_id', '')}) ",
                (status, _label_style(status)),
            )
            if _quoted_whole(text, _next_reply(messages, index)):
                line.append(": quoted whole in the reply below", style="dim")
            elif text:
                line.append(f": {_hanging(text, width)}")
            console.print(line)
            if isinstance(artifact, dict) and isinstance(artifact.get("stored"), dict):
                console.print(Text(" " * (width + 7) + whole_result_hint(message, reader), "dim"))
            continue
        calls = getattr(message, "tool_calls", None) or []
        if text or not calls:
            console.print(Text.assemble(_label(message.type, number), _hanging(text, width)))
        for nth, call in enumerate(calls):
            args = json.dumps(call["args"], ensure_ascii=False, default=str)
            lead = _label(message.type, number) if nth == 0 and not text else " " * (width + 7)
            console.print(Text.assemble(lead, f"→ {call['name']} ({call.get('id')}) {args}"))


def _hanging(text: str, width: int) -> str:
    """A message's text whose later lines are indented under its first, past the label
    (``width`` digits of its number and the kind): a multi-line message keeps its shape."""
    return text.replace("\n", "\n" + " " * (width + 7))


def _next_reply(messages: Sequence[AnyMessage], index: int) -> str | None:
    """The text of the model's message that follows the tool results after ``index``."""
    for message in messages[index + 1 :]:
        if message.type != "tool":
            return message.text if message.type == "ai" else None
    return None


def print_audit(snapshot: ConversationSnapshot, console: Console) -> None:
    if not snapshot.audit:
        return
    first = snapshot.audit_offset
    console.print(
        Text(
            f"Audit log (entries {first + 1}-{first + len(snapshot.audit)} of "
            f"{snapshot.audit_total}):",
            style="bold",
        )
    )
    width = len(str(first + len(snapshot.audit)))
    for number, entry in enumerate(snapshot.audit, start=first + 1):
        parts = [f"{number:>{width}}", f"{entry.at:%Y-%m-%d %H:%M:%S}", f"{entry.event:<11}"]
        parts.append(entry.actor)
        if entry.name:
            parts.append(entry.name)
        if entry.tool_call_id:
            parts.append(f"({entry.tool_call_id})")
        if entry.detail:
            parts.append(json.dumps(entry.detail, ensure_ascii=False, default=str))
        console.print(Text("  " + "  ".join(parts)))


def print_conversation_list(
    found: Sequence[ConversationSummary], shown: int, console: Console
) -> None:
    """The first ``shown`` of ``found`` as a table (header in bold), and how many more."""
    rows = [("SESSION", "STATUS", "PENDING TOOLS", "STARTED (UTC)", "LAST ACTIVITY (UTC)")]
    for c in found[:shown]:
        rows.append(
            (
                c.session_id,
                c.status,
                ",".join(c.pending_tools) or "-",
                c.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                c.last_activity_at.strftime("%Y-%m-%d %H:%M:%S"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for number, row in enumerate(rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        console.print(Text(f"{line}  {row[-1]}", style="bold" if number == 0 else ""))
    if len(found) > shown:
        console.print(Text(f"({len(found) - shown} more; see them with --limit)", style="dim"))


def print_catalogue(
    catalogue: ToolCatalogue,
    console: Console,
    *,
    subagent_tools: Mapping[str, Sequence[str]],
    policies_file: str | None,
    previews_with: Mapping[str, str] | None = None,
) -> None:
    """Each tool with its policy, whether it has a preview (for an MCP tool, the read
    tool ``previews_with`` names) and an inverse, and the first line of its description;
    each subagent with the tools it may use (``subagent_tools``), then the policy file's
    rules in the order they are tried."""
    for spec in catalogue.tools:
        reader = (previews_with or {}).get(spec.name)
        has = [f"preview by {reader}" if reader else "preview"] if spec.has_preview else []
        has += ["inverse"] if spec.has_inverse else []
        flags = f"  ({', '.join(has)})" if has else ""
        console.print(Text.assemble((spec.name, "bold"), f"  {spec.policy}{flags}"))
        summary = spec.description.strip().splitlines()[0] if spec.description.strip() else ""
        if summary:
            console.print(Text(f"    {summary}", style="dim"))
    for subagent in catalogue.subagents:
        usable = ", ".join(subagent_tools.get(subagent.name, ()))
        console.print(Text(f"subagent {subagent.name} may use only: {usable}", style="bold"))
    if not catalogue.rules:
        console.print(
            Text("no policy rules (PARLEY_POLICIES unset): each tool's own policy applies")
        )
        return
    console.print(Text(f"rules from {policies_file}, first match wins:", style="bold"))
    for rule in catalogue.rules:
        when = [f"{name}={pattern}" for name, pattern in rule.args.items()]
        window = " ".join(filter(None, [rule.days, rule.hours]))
        if window:
            offset = "" if rule.utc_offset == "+00:00" else f" UTC{rule.utc_offset}"
            when.append(("outside " if rule.outside else "within ") + window + offset)
        condition = f" when {', '.join(when)}" if when else ""
        timeout = ""
        if rule.timeout_seconds is not None or rule.on_timeout != "expire":
            after = f" after {rule.timeout_seconds:g} s" if rule.timeout_seconds else ""
            target = f" to {rule.escalate_to}" if rule.escalate_to else ""
            timeout = f"; undecided{after}: {rule.on_timeout}{target}"
        undo = f"; undo window {rule.undo_seconds} s" if rule.undo_seconds else ""
        if rule.judge is not None:
            undo += (
                f"; judged first by {rule.judge_model} (in doubt: {rule.on_doubt or 'escalate'})"
            )
        line = f"  {rule.name}: {rule.tool}{condition} -> {rule.decide}{timeout}{undo}"
        console.print(Text(line))
