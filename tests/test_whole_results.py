"""End to end: every result can be read whole. A 3 MB tool result reaches the model (and so the
transcript, ``parley show``, the page's JSON) as its first 32,000 characters; the worker
keeps it whole in the payload store, ``show`` says how to get it, and ``parley result
--output`` and ``GET /v1/conversations/{id}/results/{call_id}`` give it back byte for
byte, to the owner and reviewers only. (A result retention deleted answers 410:
``tests/test_retention_answers.py``.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from playwright.async_api import Page, expect
from temporalio.client import Client

from parley.contracts import MODEL_RESULT_MAX_CHARS
from parley.storage import LocalFileStorageDriver
from tests.support import registry
from tests.support.browser import page_gateway
from tests.support.cli import parley, parley_all
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.long_transcripts import Reads
from tests.support.processes import cli_env
from tests.support.store_tools import toolset
from tests.support.transcripts import new_session

USER = "alice"
SIZE = 3 * 1024 * 1024


async def test_a_3_mb_result_is_read_whole_from_the_cli_and_the_gateway(
    parley_worker, client: Client, payload_store: LocalFileStorageDriver, tmp_path: Path
) -> None:
    sid = new_session()
    async with parley_worker(registry(*toolset()), Reads()) as conv:
        turn = await conv.send(sid, USER, f"page {SIZE}")
        assert turn.reply == "done"
        (ran,) = turn.results
        whole = "page 1: " + "x" * (SIZE - len("page 1: "))
        assert ran.content_chars == SIZE  # the turn's result is a preview

        env = cli_env(client, payload_store, conv.settings.task_queue)
        who = ["--session", sid, "--user", USER]
        saved = tmp_path / "result.txt"
        written, shown, as_json, stdout = await asyncio.to_thread(
            parley_all,
            (env, ["result", *who, "--call", ran.tool_call_id, "--output", str(saved)]),
            (env, ["show", *who]),
            (env, ["show", *who, "--offset", "0", "--json"]),
            (env, ["result", *who, "--call", ran.tool_call_id]),
        )
        for done in (written, shown, as_json, stdout):
            assert done.returncode == 0, done.stderr
        assert saved.read_bytes() == whole.encode()
        assert stdout.stdout == whole
        assert f"{SIZE:,} characters" in written.stderr and str(saved) in written.stderr
        # show prints what the model read, then exactly how to read the rest.
        hint = f"parley result --session {sid} --user {USER} --call {ran.tool_call_id}"
        assert hint in shown.stdout, shown.stdout
        assert f"the whole result, {SIZE:,} characters, is kept" in shown.stdout
        (message,) = [m for m in json.loads(as_json.stdout)["transcript"] if m["type"] == "tool"]
        assert len(message["content"]) < MODEL_RESULT_MAX_CHARS + 500
        assert message["artifact"]["stored"]["content_chars"] == SIZE

        missing = await asyncio.to_thread(parley, env, "result", *who, "--call", "nope")
        assert missing.returncode == 1 and "has no result of call nope" in missing.stderr

        async with (
            serve_gateway(conv) as base,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            url = f"/v1/conversations/{sid}/results/{ran.tool_call_id}"
            answer = await http.get(url, headers=auth(ALICE_TOKEN))
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"] == "text/plain; charset=utf-8"
            assert answer.content == whole.encode()
            envelope = await http.get(url, params={"format": "json"}, headers=auth(ALICE_TOKEN))
            assert envelope.json()["status"] == "success"
            assert envelope.json()["content"] == whole
            # Read like the conversation: another user is not told it exists.
            stranger = await http.get(url, headers=auth(BOB_TOKEN))
            assert stranger.status_code == 404, stranger.text
            assert stranger.json()["error"]["type"] == "NotFound"


async def test_the_page_links_a_cut_result_to_its_whole(parley_worker, page: Page) -> None:
    """The transcript shows what the model read; beside it, a link saves the whole."""
    sid, size = new_session(), 100_000
    async with page_gateway(parley_worker, registry(*toolset()), Reads(), page) as (base, conv):
        (ran,) = (await conv.send(sid, USER, f"page {size}")).results
        await page.goto(f"{base}/#token={ALICE_TOKEN}&c={sid}")
        link = page.get_by_test_id("whole-result")
        await expect(link).to_have_text(f"the whole result ({size:,} characters)")
        async with page.expect_download() as downloading:
            await link.click()
        download = await downloading.value
        assert download.suggested_filename == f"{ran.tool_call_id}.txt"
        saved = Path(await download.path()).read_bytes()
        assert saved == ("page 1: " + "x" * (size - len("page 1: "))).encode()
