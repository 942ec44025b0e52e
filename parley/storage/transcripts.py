"""The model's transcript chain: immutable segments in the payload store, each pointing
at the previous one, and a worker's in-memory cache of whole transcripts.

Outside the workflow sandbox (worker, activities, clients); the workflow only ever sees
the small ``ContextRef`` this module hands out. A ``ContextRef``'s claim leaves out the
part of the store it was written in when that is the store's own (``PayloadStore.home``):
it travels in every ``call_model`` input and output, and its reader, a worker or client
of the same cluster and namespace, looks there first (``parley.storage.local``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

from langchain_core.messages import AnyMessage
from pydantic import BaseModel, Field
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from parley.contracts import ContextRef, Messages, PayloadConverter, message_chars
from parley.storage.base import PayloadStore

_Stored = TypeVar("_Stored", bound=BaseModel)
#: A cache key: a claim's items, sorted.
_Key = tuple[tuple[str, str], ...]

#: Each time the transcript passes a multiple of this many messages, ``call_model``
#: writes a checkpoint (the whole transcript in one segment, no parent): a segment holds
#: at least one message, so a cold worker reads at most this many objects.
CHECKPOINT_EVERY_MESSAGES = 256


class TranscriptSegment(BaseModel):
    """One stored piece of a transcript: messages appended after ``parent``."""

    parent: ContextRef | None = None
    messages: Messages = Field(default_factory=list)


#: How much transcript text (``message_chars``) a worker keeps in memory: the chains'
#: heads of the conversations it serves, the least recently used going first.
TRANSCRIPT_CACHE_CHARS = 64 * 1024 * 1024
#: At most this many conversations' transcripts (the worker passes its workflow cache's).
TRANSCRIPT_CACHE_ENTRIES = 1000


class TranscriptStore:
    """Reads and extends transcript chains through a ``StorageDriver``, with an
    in-memory cache of whole transcripts (segments are immutable, so it never goes
    stale), bounded by their size (``cache_chars``) and their number
    (``cache_entries``): one entry per conversation, its chain's head, so the
    conversations a worker serves at once read from memory as long as their transcripts
    fit. The number matters for many short conversations, whose messages weigh far more
    as Python objects than their characters say: the worker passes its workflow cache's
    size, beyond which a conversation is replayed anyway."""

    def __init__(
        self,
        driver: StorageDriver,
        *,
        cache_chars: int = TRANSCRIPT_CACHE_CHARS,
        cache_entries: int = TRANSCRIPT_CACHE_ENTRIES,
    ) -> None:
        self._driver = driver
        #: key → (the whole transcript, its size in ``message_chars``)
        self._cache: OrderedDict[_Key, tuple[list[AnyMessage], int]] = OrderedDict()
        self._cache_chars, self._cache_entries = cache_chars, cache_entries
        self._cached_chars = 0
        self._converter = PayloadConverter()

    @staticmethod
    def _key(ref: ContextRef) -> _Key:
        return tuple(sorted(ref.claim.items()))

    def _remember(self, ref: ContextRef, messages: list[AnyMessage], chars: int) -> None:
        self._forget(ref)
        self._cache[self._key(ref)] = (messages, chars)
        self._cached_chars += chars
        while len(self._cache) > 1 and (
            self._cached_chars > self._cache_chars or len(self._cache) > self._cache_entries
        ):
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached_chars -= dropped

    def _forget(self, ref: ContextRef) -> None:
        if (entry := self._cache.pop(self._key(ref), None)) is not None:
            self._cached_chars -= entry[1]

    async def load(self, ref: ContextRef | None) -> list[AnyMessage]:
        """The whole transcript up to ``ref`` (a new list; callers may append)."""
        messages, _ = await self._load(ref)
        return list(messages)

    async def _load(self, ref: ContextRef | None) -> tuple[list[AnyMessage], int]:
        """The cached (shared: do not change it) transcript up to ``ref``, and its size."""
        if ref is None:
            return [], 0
        if (cached := self._cache.get(self._key(ref))) is not None:
            self._cache.move_to_end(self._key(ref))
            return cached
        segments: list[TranscriptSegment] = []
        base: list[AnyMessage] = []
        chars = 0
        cursor: ContextRef | None = ref
        while cursor is not None:
            if (cached := self._cache.get(self._key(cursor))) is not None:
                base, chars = list(cached[0]), cached[1]
                break
            segment = await self._read(cursor)
            segments.append(segment)
            cursor = segment.parent
        messages = base
        for segment in reversed(segments):
            messages.extend(segment.messages)
            chars += sum(message_chars(m) for m in segment.messages)
        if len(messages) != ref.length:
            raise ValueError(
                f"the stored transcript has {len(messages)} messages where its reference "
                f"says {ref.length}"
            )
        self._remember(ref, messages, chars)
        return messages, chars

    async def append(
        self,
        parent: ContextRef | None,
        messages: list[AnyMessage],
        *,
        workflow_id: str,
        namespace: str,
    ) -> ContextRef:
        """Store ``messages`` after ``parent`` and return the new chain head. When the
        transcript passes a multiple of ``CHECKPOINT_EVERY_MESSAGES``, the whole of it is
        written as one segment instead, so that a cold reader walks a bounded chain."""
        before, chars = await self._load(parent)
        whole = [*before, *messages]
        chars += sum(message_chars(m) for m in messages)
        if parent is not None and (
            parent.length // CHECKPOINT_EVERY_MESSAGES != len(whole) // CHECKPOINT_EVERY_MESSAGES
        ):
            segment = TranscriptSegment(parent=None, messages=whole)
        else:
            segment = TranscriptSegment(parent=parent, messages=list(messages))
        payload = self._converter.to_payloads([segment])[0]
        context = StorageDriverStoreContext(
            target=StorageDriverWorkflowInfo(namespace=namespace, id=workflow_id)
        )
        [claim] = await self._driver.store(context, [payload])
        # The model's view keeps its compaction as the chain grows.
        compaction = parent.compaction if parent is not None else None
        ref = ContextRef(claim=self._short(claim), length=len(whole), compaction=compaction)
        # The chain moved on: its old head is read again only if this model call is
        # retried, so it leaves the cache to the conversations' current heads.
        if parent is not None:
            self._forget(parent)
        self._remember(ref, whole, chars)
        return ref

    def _short(self, claim: StorageDriverClaim) -> dict[str, str]:
        """``claim`` without its part when that is the store's own (see the module
        docstring): ~55 bytes less in each of a turn's four ``call_model`` payloads."""
        data = dict(claim.claim_data)
        home = self._driver.home() if isinstance(self._driver, PayloadStore) else None
        if home is not None and data.get("part") == home:
            del data["part"]
        return data

    async def _read(self, ref: ContextRef) -> TranscriptSegment:
        return await read_stored(self._driver, ref.claim, TranscriptSegment, "transcript segment")


class StoredObjectUnreadable(ValueError):
    """A stored object of Parley's own that the store could not give back: gone (deleted
    by retention, whose record ``parley.storage.base.collected_record`` reads), or a
    store other than the one that wrote it. Clients say which (``parley.client``)."""


async def read_stored(
    driver: StorageDriver, claim: dict[str, str], model: type[_Stored], what: str
) -> _Stored:
    """One stored object of Parley's own (a transcript or audit archive segment), read
    back as ``model``; a store that cannot give it raises ``StoredObjectUnreadable`` (a
    ``ValueError``) saying so."""
    try:
        [payload] = await driver.retrieve(
            StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=claim)]
        )
    except Exception as err:
        raise StoredObjectUnreadable(
            f"{what} {claim} could not be read from store {driver.name()!r} "
            f"({type(err).__name__}: {err}): every worker and client must use the same "
            "PARLEY_PAYLOAD_STORE"
        ) from err
    [stored] = PayloadConverter().from_payloads([payload], [model])
    return stored
