"""End to end: following a conversation can never wedge it: real ``parley gateway`` and
``parley worker`` processes on a dev server of this module's own, whose metrics count
the queries the gateway makes, and two real Chromium tabs.

The gateway keeps one feed (one ``wait_for_events`` at a time) per conversation,
whoever follows, stopped when its last follower leaves; a follower's ``after`` is
bounded by the latest offset. Before, a second user's stream replaced the feed
without stopping the first, the leaked feeds evicted one another's waits in a loop
(about 143 history events a second, the run's 2,000 updates gone in 40 s), and one
follower with ``after=10**18`` made every other follower query about 110 times a
second.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import httpx
import pytest
from playwright.async_api import Browser, expect
from temporalio.testing import WorkflowEnvironment

from parley.contracts import workflow_id_for
from parley.storage import LocalFileStorageDriver
from tests.support.gateway import (
    ALICE_TOKEN,
    BOB_TOKEN,
    TOKENS,
    EventReader,
    GatewayProcess,
    auth,
    collect_until,
    gateway_processes,
    metered_dev_server,
    queries_answered,
    run_history,
    updates_accepted,
)
from tests.support.ports import free_port

ALICE = auth(ALICE_TOKEN)
BOB = auth(BOB_TOKEN)
#: Far below Temporal's 2,000 updates per run: each follower costs at most a wait or two.
MOST_UPDATES = 100
#: Seconds over which the query rate is measured.
WINDOW_SECONDS = 6.0


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
async def metered_env(
    payload_store: LocalFileStorageDriver, metrics_port: int
) -> AsyncIterator[WorkflowEnvironment]:
    async with metered_dev_server(payload_store, metrics_port) as env:
        yield env


@pytest.fixture(scope="module")
def gateway(
    metered_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("feeds")
    with gateway_processes(metered_env.client, payload_store, home, TOKENS) as running:
        yield running
    assert "Traceback" not in running.log(), running.log()[-3000:]


async def waiting_conversation(http: httpx.AsyncClient) -> str:
    """Alice's new conversation, bob its reviewer, waiting for a decision on f1."""
    sid = f"feeds-{uuid.uuid4().hex[:10]}"
    sent = await http.post(
        f"/v1/conversations/{sid}/messages",
        json={"text": "write it", "reviewers": ["bob"]},
        headers=ALICE,
    )
    assert sent.json()["status"] == "awaiting_approval", sent.text
    return sid


async def history_length(env: WorkflowEnvironment, sid: str) -> int:
    described = await env.client.get_workflow_handle(workflow_id_for(sid)).describe()
    return described.raw_description.workflow_execution_info.history_length


async def test_owner_and_reviewer_streams_and_tabs_come_and_go_and_the_run_stays_small(
    gateway: GatewayProcess, metered_env: WorkflowEnvironment, browser: Browser
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        sid = await waiting_conversation(http)
        events = f"/v1/conversations/{sid}/events"

        # Ten streams, alice's and bob's in turn, each opened while the previous one
        # (the other user's) is still open, then closed.
        async with AsyncExitStack() as previous:
            for number in range(10):
                headers = ALICE if number % 2 == 0 else BOB
                current = AsyncExitStack()
                stream = await current.enter_async_context(
                    http.stream("GET", events, headers=headers)
                )
                assert stream.status_code == 200
                seen = await collect_until(stream, lambda got: got[-1].type == "RUN_FINISHED")
                assert seen[0].type == "RUN_STARTED"
                await previous.aclose()
                previous.push_async_exit(current)

        # Two tabs, alice's and bob's, each reloaded five times; each load follows
        # the conversation live.
        tabs = []
        for token in (ALICE_TOKEN, BOB_TOKEN):
            context = await browser.new_context()
            tab = await context.new_page()
            await tab.goto(f"{gateway.url}/#token={token}&c={sid}")
            tabs.append((context, tab))
        for _ in range(5):
            for _, tab in tabs:
                await tab.reload()
                await expect(tab.get_by_test_id("status")).to_have_attribute(
                    "data-status", "awaiting_approval", timeout=20_000
                )
                await expect(tab.locator("#live.on")).to_have_count(1, timeout=20_000)
        for context, _ in tabs:
            await context.close()

        # History stops growing within 5 s of the last follower leaving (measured
        # over a window: the thing checked is that nothing happens).
        left = time.monotonic()
        lengths: list[tuple[float, int]] = []
        while time.monotonic() - left < 9:
            lengths.append((time.monotonic() - left, await history_length(metered_env, sid)))
            await asyncio.sleep(0.5)
        settled = [length for at, length in lengths if at >= 5]
        assert len(set(settled)) == 1, f"history still grows after 5 s: {lengths}"

        history = await run_history(metered_env.client, sid)
        updates = updates_accepted(history)
        print(f"feeds: {len(history)} history events, {updates} updates accepted")
        assert updates < MOST_UPDATES, updates

        decided = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": "f1", "action": "approve"}]},
            headers=BOB,
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["reply"] == "written"


async def measure_queries(metrics_port: int) -> tuple[int, float]:
    started = time.monotonic()
    before = await queries_answered(metrics_port)
    await asyncio.sleep(WINDOW_SECONDS)
    return await queries_answered(metrics_port) - before, time.monotonic() - started


async def test_a_follower_far_ahead_leaves_the_others_query_rate_unchanged(
    gateway: GatewayProcess, metered_env: WorkflowEnvironment, metrics_port: int
) -> None:
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        AsyncExitStack() as streams,
    ):
        sid = await waiting_conversation(http)
        events = f"/v1/conversations/{sid}/events"
        followers = []
        for headers in (BOB, ALICE, ALICE):
            stream = await streams.enter_async_context(http.stream("GET", events, headers=headers))
            follower = EventReader(stream)
            await follower.until(lambda got: got[-1].type == "RUN_FINISHED")
            followers.append(follower)
        updates_before = updates_accepted(await run_history(metered_env.client, sid))

        without, seconds = await measure_queries(metrics_port)

        ahead = await streams.enter_async_context(
            http.stream("GET", f"{events}?after={10**18}", headers=ALICE)
        )
        assert ahead.status_code == 200
        # One more follower comes after it (the earlier ones may sleep until their
        # keepalive before they would notice anything).
        stream = await streams.enter_async_context(http.stream("GET", events, headers=ALICE))
        follower = EventReader(stream)
        await follower.until(lambda got: got[-1].type == "RUN_FINISHED")
        followers.append(follower)
        with_it, seconds_with = await measure_queries(metrics_port)
        updates_after = updates_accepted(await run_history(metered_env.client, sid))
        print(
            f"feeds: {without} queries in {seconds:.1f} s without the follower at 10**18, "
            f"{with_it} in {seconds_with:.1f} s with it; updates {updates_before} -> "
            f"{updates_after}"
        )
        # Idle followers query once per keepalive (15 s); the spin was ~110 a second.
        assert with_it <= without + 3, (without, with_it)
        assert updates_after - updates_before <= 1

        # The follower far ahead reads as one at the latest offset: it gets what
        # comes next, and so does everyone else.
        decided = await http.post(
            f"/v1/conversations/{sid}/decisions",
            json={"decisions": [{"tool_call_id": "f1", "action": "approve"}]},
            headers=ALICE,
        )
        assert decided.json()["reply"] == "written", decided.text
        for follower in [*followers, EventReader(ahead)]:
            got = await follower.until(lambda seen: seen[-1].type == "RUN_FINISHED")
            assert got[0].type == "RUN_STARTED"
            assert any(e.type == "TOOL_CALL_RESULT" for e in got)
