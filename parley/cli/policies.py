"""``parley policies suggest``: rules the audit of recent conversations (or exported audit
files) suggests, printed as policy-file text to review; it never writes the policy file.
Client side: the audit is read through ``parley.client.policy_evidence``, the rules made
by ``parley.tools.suggestions``.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from parley.cli.app import AsJson, fail, run_async, settings, warn
from parley.client import Conversations, connect
from parley.client.policy_evidence import ConversationAudit, Evidence, exported_audit, recent_audits
from parley.contracts import PolicyRule
from parley.contracts.names import check_user_id
from parley.tools import suggestions
from parley.tools.policies import load_policies

policies_app = typer.Typer(
    help="The policy file (PARLEY_POLICIES): rules the audit suggests.",
    no_args_is_help=True,
)

#: ``--since``: a number and a unit.
UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@policies_app.command()
def suggest(
    user: Annotated[
        str | None,
        typer.Option(
            "--user", "-u", help="Your user id: the conversations you own or review are read."
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only decisions this recent: 30m, 12h, 7d, 2w (default 7d over Temporal, "
            "none for --audit)."
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(help="Read at most this many conversations.", min=1, max=1000)
    ] = 50,
    minimum: Annotated[
        int,
        typer.Option(
            "--min", help="Suggest a rule only from this many decisions, all alike.", min=1
        ),
    ] = 5,
    audit: Annotated[
        list[Path] | None,
        typer.Option(
            "--audit",
            help="Read this exported audit (parley audit --output FILE) instead of the "
            "conversations; repeat for more.",
        ),
    ] = None,
    policies: Annotated[
        Path | None,
        typer.Option(
            help="The policy file the suggestions are for (default: PARLEY_POLICIES); a "
            "rule it already has is not suggested again."
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Print the policy rules that would have decided recent calls as people decided them,
    every time (N of N, at least --min): an argument's values generalised to a pattern
    (feat/login, feat/search: feat/*), each rule after a comment with its evidence. A
    rule never makes auto a call someone rejected, and one the policy file already has
    is left out. Nothing is applied: review the text, then add what you want to the
    policy file."""
    cutoff = None if since is None else datetime.now(UTC) - _duration(since)
    existing = _existing_rules(policies)
    if audit:
        audits = [_exported(path) for path in audit]
        read_from = ", ".join(map(str, audit))
        if not any(a.entries for a in audits):
            raise fail(f"no audit entry in {read_from}: nothing to suggest from")
    else:
        if user is None:
            raise fail(
                "give --user (your conversations and those you review are read), or "
                "--audit FILE to read an exported audit"
            )
        try:
            check_user_id(user)
        except ValueError as problem:
            raise fail(str(problem)) from None
        cutoff = cutoff or datetime.now(UTC) - timedelta(days=7)
        evidence = _read(user, cutoff, limit)
        for skipped in evidence.skipped:
            warn(f"not read: {skipped}")
        audits = evidence.audits
        if not audits:
            raise fail(
                f"none of the {evidence.listed} conversations changed since "
                f"{cutoff:%Y-%m-%d %H:%M} UTC could be read (see the warnings above)"
            )
        read_from = f"{user}'s conversations since {cutoff:%Y-%m-%d %H:%M} UTC"
        if not evidence.listed:
            raise fail(
                f"no conversation of {user} (or reviewed by {user}) changed since "
                f"{cutoff:%Y-%m-%d %H:%M} UTC: nothing to suggest from (try a longer --since)"
            )
    decided: list[suggestions.Decided] = []
    for read in audits:
        decided += suggestions.decided_calls(read.session_id, read.entries, read.args)
    if cutoff is not None:
        decided = [call for call in decided if call.at >= cutoff]
    found = suggestions.suggest(decided, existing, minimum)
    if as_json:
        print(
            json.dumps(
                {
                    "read_from": read_from,
                    "decided": found.decided,
                    "conversations": found.sessions,
                    "suggestions": [s.as_json() for s in found.rules],
                    "left_out": [
                        {"name": rule.name, "covered_by": by} for rule, by in found.covered
                    ],
                },
                indent=2,
            )
        )
        return
    sys.stdout.write(suggestions.policy_text(found, read_from))  # TOML: never read as Rich markup


def _duration(text: str) -> timedelta:
    match = re.fullmatch(r"\s*(\d+)\s*([mhdw])\s*", text.lower())
    if match is None or int(match[1]) == 0:
        raise fail(f"--since {text!r}: write a duration as 30m, 12h, 7d or 2w")
    try:  # a span that reaches back before the calendar's first day is no cutoff
        span = timedelta(**{UNITS[match[2]]: int(match[1])})
        datetime.now(UTC) - span
    except OverflowError:
        raise fail(
            f"--since {text!r} reaches back before year 1: write a shorter duration, as "
            "30m, 12h, 7d or 2w"
        ) from None
    return span


def _existing_rules(path: Path | None) -> list[PolicyRule]:
    """The rules of the policy file the suggestions are for (none when there is none)."""
    file = path if path is not None else settings().policies_file
    if file is None:
        return []
    try:
        return load_policies(file).rules
    except ValueError as problem:  # the loader's one line: file, table, mistake
        raise fail(str(problem)) from None


def _exported(path: Path) -> ConversationAudit:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as problem:
        why = getattr(problem, "strerror", None) or "not UTF-8 text"
        raise fail(f"cannot read {path}: {why}") from None
    try:
        return exported_audit(text, str(path))
    except ValueError as problem:
        raise fail(str(problem)) from None


def _read(user: str, since: datetime, limit: int) -> Evidence:
    async def work() -> Evidence:
        config = settings()
        return await recent_audits(Conversations(await connect(config), config), user, since, limit)

    return run_async(work)
