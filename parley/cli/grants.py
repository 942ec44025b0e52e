"""``parley grants --session S``: a conversation's remembered decisions (grants) in force,
what each was given for and until when; ``parley grants revoke --session S GRANT_ID``
forgets one (audited ``grant_revoked``), so the next call of its shape asks again.
Client side (``parley.client.grants``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.text import Text

from parley.cli.app import AsJson, User, conversations, fail, out, run_async
from parley.client.grants import described, grant_line, list_grants, revoke_grant
from parley.contracts.grants import RememberedDecision

grants_app = typer.Typer(
    help="A conversation's remembered decisions (grants): list them, revoke one.",
    no_args_is_help=False,
)

RememberFor = Annotated[
    int | None,
    typer.Option(
        "--remember-for",
        metavar="SECONDS",
        min=1,
        help="Remember this decision (as --remember) for SECONDS only; the policy file's "
        "max_remember_seconds (its grants table) bounds it.",
    ),
]

OptionalSession = Annotated[
    str | None, typer.Option("--session", "-s", help="Conversation (session) id.")
]


@grants_app.callback(invoke_without_command=True)
def grants(
    ctx: typer.Context,
    session: OptionalSession = None,
    user: User = "",
    as_json: AsJson = False,
) -> None:
    """List the conversation's remembered decisions (approve --remember, reject
    --remember): the tool and arguments, approve or reject, who gave it and when, when it
    ends, and what it was given for (the tool's description, the policy file's version,
    the MCP server's version). A change to any of them, or its end, makes the next such
    call ask again."""
    if ctx.invoked_subcommand is not None:
        return
    if not session:
        raise fail("parley grants needs --session S (the conversation whose grants to list)")
    found = run_async(lambda: _listed(session, user))
    now = datetime.now(UTC)
    if as_json:
        print(json.dumps({"grants": [described(g, now) for g in found]}, indent=2))
        return
    if not found:
        out.print(Text(f"no remembered decisions in {session}"))
        return
    for grant in found:
        out.print(Text(grant_line(grant, now)))
    out.print(Text(f"revoke one: parley grants revoke --session {session} --user {user} ID"))


async def _listed(session: str, user: str) -> list[RememberedDecision]:
    return await list_grants(await conversations(session, user), session, user)


@grants_app.command("revoke")
def revoke(
    grant_id: Annotated[
        str, typer.Argument(metavar="GRANT_ID", help="The grant's id (parley grants lists them).")
    ],
    session: OptionalSession = None,
    user: User = "",
    as_json: AsJson = False,
) -> None:
    """Revoke a remembered decision: the next call of its tool and arguments waits for a
    decision again. The owner or a reviewer may; audited (grant_revoked)."""
    if not session:
        raise fail("parley grants revoke needs --session S (the conversation of the grant)")

    async def work() -> RememberedDecision:
        return await revoke_grant(await conversations(session, user), session, user, grant_id)

    grant = run_async(work)
    if as_json:
        print(json.dumps({"revoked": described(grant, datetime.now(UTC))}, indent=2))
        return
    out.print(Text(f"revoked: {grant.tool_call_id} ({grant.shape}); such calls ask again"))
