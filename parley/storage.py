"""Where large values live: Temporal's claim-check storage and the model's transcript chain.

Outside the workflow sandbox (worker, activities, clients); the workflow only ever sees
the small references this module hands out.

Two things keep every payload in history small, whatever the conversation's length:

- **Claim check** (``temporalio.converter.ExternalStorage``). Every component (worker,
  CLI, gateway, tests, Replayer) builds its data converter with :func:`data_converter`:
  ``pydantic_data_converter`` plus external storage. A payload of
  ``OFFLOAD_THRESHOLD_BYTES`` or more (an activity's input or result, an update's
  argument or result, the continue-as-new input) is written to the store once and
  history keeps a reference of about 200 bytes. Smaller payloads stay inline, so the
  Temporal UI shows ordinary arguments and results as readable JSON.
- **Transcript chain** (:class:`TranscriptStore`). The model needs the whole transcript
  on every call; sending it as the activity's input would copy it into history (or into
  the store) once per model call. Instead ``call_model`` appends the messages that are
  new since its previous call as one immutable segment pointing at the previous one, and
  returns the segment's :class:`~parley.contracts.ContextRef`. Every message is stored
  once; a worker rebuilds the transcript from the chain (cached in memory) and clients
  read older pages of a long conversation from it.

The store is chosen by ``PARLEY_PAYLOAD_STORE``: a directory (the local-file driver
below, for ``parley dev``, tests and single-host deployments) or ``module:factory`` for
any ``StorageDriver``, e.g. ``temporalio.contrib.aws.s3driver.S3StorageDriver`` in
production (see the README). Every worker and client of a namespace must use the same
store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_core.messages import AnyMessage
from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from parley.contracts import ContextRef, Messages, PayloadConverter, message_chars

if TYPE_CHECKING:
    from parley.settings import Settings

OFFLOAD_THRESHOLD_BYTES = 128 * 1024
"""Payloads this large or larger go to the store. 128 KiB keeps what people read in the
Temporal UI inline (tool arguments, a 20 KB web page, a plan) and leaves every payload in
history far below Temporal's 2 MB limit and its 256 KB warning."""

#: Each time the transcript passes a multiple of this many messages, ``call_model``
#: writes a checkpoint (the whole transcript in one segment, no parent): a segment holds
#: at least one message, so a cold worker reads at most this many objects.
CHECKPOINT_EVERY_MESSAGES = 256


class LocalFileStorageDriver(StorageDriver):
    """Content-addressed files under one directory: ``<root>/<sha[:2]>/<sha>``.

    For ``parley dev``, tests and deployments whose workers share a filesystem. The same
    bytes are stored once (the name is their SHA-256); files are written atomically
    (a temporary file, then ``os.replace``) so a reader never sees half a payload.
    """

    def __init__(self, root: str | os.PathLike[str], name: str = "parley-local-file") -> None:
        self._root = Path(root)
        self._name = name

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return "parley.local-file"

    @property
    def root(self) -> Path:
        return self._root

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(self._store_all, [p.SerializeToString() for p in payloads])

    def _store_all(self, blobs: list[bytes]) -> list[StorageDriverClaim]:
        claims = []
        for blob in blobs:
            digest = hashlib.sha256(blob).hexdigest()
            path = self._root / digest[:2] / digest
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
                try:
                    with os.fdopen(fd, "wb") as out:
                        out.write(blob)
                    os.replace(temp, path)
                except BaseException:
                    Path(temp).unlink(missing_ok=True)
                    raise
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(self._retrieve_all, list(claims))

    def _retrieve_all(self, claims: list[StorageDriverClaim]) -> list[Payload]:
        payloads = []
        for claim in claims:
            digest = claim.claim_data["sha256"]
            if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
                raise ValueError(f"not a stored payload name: {digest!r}")
            path = self._root / digest[:2] / digest
            try:
                blob = path.read_bytes()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"payload {digest} is not in the store at {self._root}: every worker and "
                    "client must use the same PARLEY_PAYLOAD_STORE"
                ) from None
            payload = Payload()
            payload.ParseFromString(blob)
            payloads.append(payload)
        return payloads


def default_store_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "parley" / "payloads"


def build_driver(spec: str | None) -> StorageDriver:
    """The driver ``PARLEY_PAYLOAD_STORE`` names: a directory, or ``module:factory``
    returning a ``StorageDriver`` (an S3 driver in production)."""
    if not spec:
        return LocalFileStorageDriver(default_store_dir())
    module_name, sep, attr = spec.partition(":")
    if sep and module_name and attr and "/" not in spec and "\\" not in spec:
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec!r}: cannot load {attr!r} from {module_name!r} "
                f"({err}); give a directory or module:factory"
            ) from None
        driver = factory()
        if not isinstance(driver, StorageDriver):
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec!r} returned {type(driver).__name__}, not a "
                "temporalio.converter.StorageDriver"
            )
        return driver
    return LocalFileStorageDriver(Path(spec).expanduser())


def describe_store(spec: str | None) -> str:
    """One line naming the store ``PARLEY_PAYLOAD_STORE`` selects."""
    if not spec:
        return f"{default_store_dir()} (local files; set PARLEY_PAYLOAD_STORE to change)"
    return spec


def data_converter(
    settings: Settings | None = None, *, driver: StorageDriver | None = None
) -> DataConverter:
    """``pydantic_data_converter`` with Parley's external storage: the one converter that
    every worker, client and Replayer uses."""
    if driver is None:
        driver = build_driver(settings.payload_store if settings is not None else None)
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=PayloadConverter,
        external_storage=ExternalStorage(
            drivers=[driver], payload_size_threshold=OFFLOAD_THRESHOLD_BYTES
        ),
    )


def driver_of(converter: DataConverter) -> StorageDriver:
    """The storage driver a converter from :func:`data_converter` writes to."""
    if converter.external_storage is None or not converter.external_storage.drivers:
        raise ValueError("this data converter has no external storage; use data_converter()")
    return converter.external_storage.drivers[0]


# --- the transcript chain ------------------------------------------------------------


class TranscriptSegment(BaseModel):
    """One stored piece of a transcript: messages appended after ``parent``."""

    parent: ContextRef | None = None
    messages: Messages = Field(default_factory=list)


#: How much transcript text (``message_chars``) a worker keeps in memory: the chains'
#: heads of the conversations it serves, the least recently used going first.
TRANSCRIPT_CACHE_CHARS = 64 * 1024 * 1024


class TranscriptStore:
    """Reads and extends transcript chains through a ``StorageDriver``, with an
    in-memory cache of whole transcripts (segments are immutable, so it never goes
    stale), bounded by their size (``cache_chars``), not their number: one entry per
    conversation, its chain's head, so the conversations a worker serves at once read
    from memory as long as their transcripts fit."""

    def __init__(self, driver: StorageDriver, *, cache_chars: int = TRANSCRIPT_CACHE_CHARS) -> None:
        self._driver = driver
        #: key → (the whole transcript, its size in ``message_chars``)
        self._cache: OrderedDict[str, tuple[list[AnyMessage], int]] = OrderedDict()
        self._cache_chars = cache_chars
        self._cached_chars = 0
        self._converter = PayloadConverter()

    @staticmethod
    def _key(ref: ContextRef) -> str:
        return json.dumps(dict(sorted(ref.claim.items())))

    def _remember(self, ref: ContextRef, messages: list[AnyMessage], chars: int) -> None:
        self._forget(ref)
        self._cache[self._key(ref)] = (messages, chars)
        self._cached_chars += chars
        while self._cached_chars > self._cache_chars and len(self._cache) > 1:
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
        ref = ContextRef(claim=dict(claim.claim_data), length=len(whole))
        # The chain moved on: its old head is read again only if this model call is
        # retried, so it leaves the cache to the conversations' current heads.
        if parent is not None:
            self._forget(parent)
        self._remember(ref, whole, chars)
        return ref

    async def _read(self, ref: ContextRef) -> TranscriptSegment:
        try:
            [payload] = await self._driver.retrieve(
                StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=ref.claim)]
            )
        except Exception as err:
            raise ValueError(
                f"transcript segment {ref.claim} could not be read from store "
                f"{self._driver.name()!r} ({type(err).__name__}: {err}): every worker and "
                "client must use the same PARLEY_PAYLOAD_STORE"
            ) from err
        [segment] = self._converter.from_payloads([payload], [TranscriptSegment])
        return segment
