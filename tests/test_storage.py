"""The claim-check store and the stored transcript chain (``parley.storage``), on real
files: content-addressed, read back whole by a cold process, with bounded reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext

from parley.storage import CHECKPOINT_EVERY_MESSAGES, LocalFileStorageDriver, TranscriptStore


class CountingDriver(LocalFileStorageDriver):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        self.reads += len(claims)
        return await super().retrieve(context, claims)


async def test_a_long_chain_reads_back_whole_with_bounded_reads(tmp_path: Path) -> None:
    writer = TranscriptStore(LocalFileStorageDriver(tmp_path))
    head = None
    expected = []
    for n in range(300):  # 600 messages: two checkpoints on the way
        pair = [HumanMessage(content=f"q{n}", id=f"h{n}"), AIMessage(content=f"a{n}", id=f"m{n}")]
        head = await writer.append(head, pair, workflow_id="w", namespace="default")
        expected += pair
    assert head is not None and head.length == 600

    cold = CountingDriver(tmp_path)  # another process: nothing cached
    assert await TranscriptStore(cold).load(head) == expected
    assert cold.reads <= CHECKPOINT_EVERY_MESSAGES // 2 + 1  # back to the last checkpoint


async def test_the_same_content_is_stored_once_and_a_missing_one_is_named(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    store = TranscriptStore(driver)
    message = [HumanMessage(content="same", id="h1")]
    first = await store.append(None, message, workflow_id="w", namespace="default")
    again = await store.append(None, message, workflow_id="w", namespace="default")
    assert first == again
    assert len(await driver.inventory()) == 1  # one object, whoever stores it again

    elsewhere = TranscriptStore(LocalFileStorageDriver(tmp_path / "other"))
    with pytest.raises(ValueError, match="PARLEY_PAYLOAD_STORE"):
        await elsewhere.load(first)


async def test_conversations_taking_turns_read_from_memory_while_they_fit(
    tmp_path: Path,
) -> None:
    """A worker serving many conversations at once, their model calls interleaved (load
    the head, append the reply), reads every transcript from memory while the heads fit
    the cache's size: a chain's old head leaves it when the chain moves on. Past the
    size, the least recently used go and are read back whole."""

    async def take_turns(store: TranscriptStore, conversations: int, turns: int) -> None:
        heads: dict[int, object] = dict.fromkeys(range(conversations))
        for turn in range(turns):
            for conversation in range(conversations):
                head = heads[conversation]
                history = await store.load(head)  # type: ignore[arg-type]
                assert len(history) == turn
                message = HumanMessage(content=f"{conversation:03}:{turn:03}", id=f"h{turn}")
                heads[conversation] = await store.append(
                    head,  # type: ignore[arg-type]
                    [message],
                    workflow_id=f"w{conversation}",
                    namespace="default",
                )

    # 50 conversations of 5 seven-character messages: 1,750 characters at most.
    roomy = CountingDriver(tmp_path / "roomy")
    await take_turns(TranscriptStore(roomy, cache_chars=2_000), conversations=50, turns=5)
    assert roomy.reads == 0
    tight = CountingDriver(tmp_path / "tight")
    await take_turns(TranscriptStore(tight, cache_chars=700), conversations=50, turns=5)
    assert tight.reads > 0  # still correct (each load checked its length), from the store
    # Many short conversations: the number of heads is bounded too (a worker's workflow
    # cache), whatever their characters.
    few = CountingDriver(tmp_path / "few")
    store = TranscriptStore(few, cache_chars=2_000, cache_entries=20)
    await take_turns(store, conversations=50, turns=5)
    assert few.reads > 0 and len(store._cache) == 20
