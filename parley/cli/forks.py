"""``parley fork`` and ``parley rewind``: go on from a conversation's first N messages,
in a new conversation or in a new run of the same one. Client side (``parley.client``'s
``fork`` and ``rewind``); registered by ``parley.cli``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from parley.cli.app import AsJson, Session, User, conversations, out, run_async
from parley.client import Forked, Rewound, fork, rewind

At = Annotated[
    int,
    typer.Option(
        "--at",
        help="How many of its first messages the new conversation starts with: messages "
        "1 to N as parley show numbers them (1 is the first message only).",
    ),
]
To = Annotated[
    int,
    typer.Option(
        "--to",
        help="How many of its first messages the conversation keeps: messages 1 to N as "
        "parley show numbers them.",
    ),
]
As = Annotated[
    str, typer.Option("--as", help="The new conversation's session id (one never used).")
]


def fork_(session: Session, at: At, as_session: As, user: User, as_json: AsJson = False) -> None:
    """Start a new conversation with the first N messages of this one (its reviewers
    too, nothing pending); nothing runs again. Only the owner may."""

    async def work() -> Forked:
        conv = await conversations(session, user)
        return await fork(conv, session, user, at, as_session)

    forked = run_async(work)
    if as_json:
        print(forked.model_dump_json(indent=2))
        return
    out.print(
        Text(
            f"conversation {forked.session_id} starts with the first {forked.at} messages of "
            f"{forked.forked_from} (run {forked.from_run_id}); send it a message to go on"
        )
    )


def rewind_(session: Session, to: To, user: User, as_json: AsJson = False) -> None:
    """Keep the first N messages of a conversation and go on from there, in a new run;
    the run before keeps the whole history. Refused while a turn runs, while decisions
    are owed and once the conversation has ended. Only the owner may."""

    async def work() -> Rewound:
        conv = await conversations(session, user)
        return await rewind(conv, session, user, to)

    rewound = run_async(work)
    if as_json:
        print(rewound.model_dump_json(indent=2))
        return
    out.print(
        Text(
            f"conversation {rewound.session_id} goes on from its first {rewound.to} messages; "
            f"the run before is {rewound.previous_run_id} (temporal workflow show -w "
            f"conversation-{rewound.session_id} --run-id {rewound.previous_run_id})"
        )
    )
