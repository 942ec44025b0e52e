"""One numbering everywhere: messages are numbered from 1, as ``fork --at N`` and
``rewind --to N`` count them (the first N messages). ``show`` prints the number beside
each message, and its headers (``messages 3-5 of 6``, ``Audit log (entries 1-…)``) count
the same way; ``--offset N`` skips the first N messages, so a page starts at message N +
1. The JSON keeps ``transcript_offset`` as before: the number of messages before the
page."""

from __future__ import annotations

import asyncio
import json
import re

from temporalio.client import Client

from parley.storage import LocalFileStorageDriver
from tests.support import registry
from tests.support.cli import parley, parley_all
from tests.support.long_transcripts import Reads
from tests.support.processes import cli_env
from tests.support.store_tools import toolset
from tests.support.transcripts import new_session

USER = "alice"
MESSAGE = re.compile(r"\s*(\d+) +(human|ai|tool) (.*)")


def numbered(shown: str) -> dict[int, str]:
    """Each numbered message line of ``show``'s output: number → the rest of it."""
    found = {}
    for line in shown.splitlines():
        if match := MESSAGE.fullmatch(line):
            found[int(match.group(1))] = f"{match.group(2)} {match.group(3)}"
    return found


async def test_show_audit_fork_and_rewind_count_messages_alike(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver
) -> None:
    sid, copy = new_session(), new_session()
    async with parley_worker(registry(*toolset()), Reads()) as conv:
        await conv.send(sid, USER, "hello")  # 1 human, 2 ai "re: hello"
        await conv.send(sid, USER, "page 10")  # 3 human, 4 ai (call), 5 tool, 6 ai "done"
        env = cli_env(client, payload_store, conv.settings.task_queue)
        who = ["--session", sid, "--user", USER]
        whole, page, as_json = await asyncio.to_thread(
            parley_all,
            (env, ["show", *who]),
            (env, ["show", *who, "--offset", "2", "--limit", "3"]),
            (env, ["show", *who, "--offset", "2", "--limit", "3", "--json"]),
        )
        messages = numbered(whole.stdout)
        assert list(messages) == [1, 2, 3, 4, 5, 6], whole.stdout
        assert messages[1] == "human hello" and messages[2] == "ai re: hello"
        assert messages[5].startswith("tool big_page")
        assert re.search(r"Audit log \(entries 1-\d+ of \d+\):", whole.stdout), whole.stdout
        assert re.search(r"^\s*1  \d{4}-\d\d-\d\d ", whole.stdout, re.M), whole.stdout

        assert "messages 3-5 of 6" in page.stdout, page.stdout
        assert numbered(page.stdout) == {n: messages[n] for n in (3, 4, 5)}
        assert json.loads(as_json.stdout)["transcript_offset"] == 2  # as before: skipped

        # fork --at 2 and rewind --to 2 keep messages 1-2, as show numbered them.
        forked = await asyncio.to_thread(parley, env, "fork", *who, "--at", "2", "--as", copy)
        assert forked.returncode == 0, forked.stderr
        rewound = await asyncio.to_thread(parley, env, "rewind", *who, "--to", "2")
        assert rewound.returncode == 0, rewound.stderr
        after = await asyncio.to_thread(
            parley_all,
            (env, ["show", "--session", copy, "--user", USER]),
            (env, ["show", *who]),
        )
        for shown in after:
            assert numbered(shown.stdout) == {1: messages[1], 2: messages[2]}, shown.stdout
