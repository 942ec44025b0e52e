"""The local-directory payload store: content-addressed files under one directory.

Outside the workflow sandbox (worker, activities, clients). For ``parley dev``, tests and
single-host deployments. Layout under the root:

- ``<sha[:2]>/<sha>``: the objects (the serialized payload; its name is its SHA-256, so
  the same bytes are stored once, whichever conversations store them);
- ``refs/<sha[:2]>/<sha>/<referrer>``: one empty file per conversation that stored the
  object (its time says when it last did), so retention knows who still needs it;
- ``referrers/<referrer>``: who a referrer name stands for (namespace and workflow id);
- ``collected/<referrer>``: retention's record that it collected what the referrer
  stored (when, and the retention period), for readers that find it gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from parley.storage.base import Collected, PayloadStore, Referrer, StoredObject, referrer_of

_HEX = frozenset("0123456789abcdef")


def _when(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _write_atomically(path: Path, data: bytes) -> None:
    """A reader sees the whole file or none: a temporary file, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


class LocalFileStorageDriver(PayloadStore):
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

    def location(self) -> str:
        return str(self._root)

    def check_access(self) -> None:
        """Without creating anything (a reading client may have a read-only copy): the
        root is a directory, or can be created in the nearest existing parent."""
        if self._root.exists():
            if not self._root.is_dir():
                raise ValueError(
                    f"PARLEY_PAYLOAD_STORE={str(self._root)!r} is a file, not a directory; "
                    "name a directory or s3://bucket"
                )
            return
        parent = next(p for p in self._root.absolute().parents if p.exists())
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={str(self._root)!r} cannot be created: {parent} is "
                "not a writable directory; name another directory or s3://bucket"
            )

    def _object(self, digest: str) -> Path:
        return self._root / digest[:2] / digest

    def _marks(self, digest: str) -> Path:
        return self._root / "refs" / digest[:2] / digest

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        referrer = referrer_of(context)
        blobs = [p.SerializeToString() for p in payloads]
        return await asyncio.to_thread(self._store_all, blobs, referrer)

    def _store_all(self, blobs: list[bytes], referrer: Referrer | None) -> list[StorageDriverClaim]:
        claims = []
        for blob in blobs:
            digest = hashlib.sha256(blob).hexdigest()
            if referrer is not None:
                # Marked before the object is written or found: retention, which removes
                # an object only when no mark appeared since it looked, cannot take it
                # from under this store.
                self._mark(digest, referrer)
            path = self._object(digest)
            if not path.exists():
                _write_atomically(path, blob)
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    def _mark(self, digest: str, referrer: Referrer) -> None:
        name = referrer.digest()
        who = self._root / "referrers" / name
        if not who.exists():
            identity = {"namespace": referrer.namespace, "workflow_id": referrer.workflow_id}
            _write_atomically(who, json.dumps(identity).encode())
        mark = self._marks(digest) / name
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()  # created, or its time moved to now: this referrer stored it again

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(self._retrieve_all, list(claims))

    def _retrieve_all(self, claims: list[StorageDriverClaim]) -> list[Payload]:
        payloads = []
        for claim in claims:
            digest = claim.claim_data["sha256"]
            if len(digest) != 64 or not set(digest) <= _HEX:
                raise ValueError(f"not a stored payload name: {digest!r}")
            try:
                blob = self._object(digest).read_bytes()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"payload {digest} is not in the store at {self._root}: every worker and "
                    "client must use the same PARLEY_PAYLOAD_STORE"
                ) from None
            if hashlib.sha256(blob).hexdigest() != digest:
                # As the S3 driver does: a damaged file is never taken for the payload.
                raise ValueError(
                    f"payload {digest} in the store at {self._root} is damaged: its content "
                    "does not match its SHA-256"
                )
            payload = Payload()
            payload.ParseFromString(blob)
            payloads.append(payload)
        return payloads

    # --- retention -------------------------------------------------------------------

    async def inventory(self) -> list[StoredObject]:
        return await asyncio.to_thread(self._inventory)

    def _inventory(self) -> list[StoredObject]:
        found = []
        identities: dict[str, Referrer | None] = {}
        if not self._root.is_dir():
            return []
        for folder in sorted(self._root.iterdir()):
            if len(folder.name) != 2 or not set(folder.name) <= _HEX or not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if path.name.startswith(".tmp-"):
                    continue  # a write under way (or a crashed one's leftover)
                try:
                    stat = path.stat()
                    marks = self._read_marks(path.name, identities)
                except FileNotFoundError:
                    continue  # removed meanwhile
                found.append(
                    StoredObject(
                        key=path.name,
                        size=stat.st_size,
                        modified=datetime.fromtimestamp(stat.st_mtime, UTC),
                        referrers=marks,
                    )
                )
        return found

    def _read_marks(
        self, digest: str, identities: dict[str, Referrer | None]
    ) -> dict[Referrer, datetime]:
        folder = self._marks(digest)
        if not folder.is_dir():
            return {}
        marks = {}
        for mark in folder.iterdir():
            if mark.name not in identities:
                identities[mark.name] = self._identity(mark.name)
            if (referrer := identities[mark.name]) is not None:
                marks[referrer] = _when(mark)
        return marks

    def _identity(self, name: str) -> Referrer | None:
        try:
            raw = json.loads((self._root / "referrers" / name).read_text())
            return Referrer(raw["namespace"], raw["workflow_id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    async def remove(self, stored: StoredObject) -> bool:
        return await asyncio.to_thread(self._remove, stored)

    def _remove(self, stored: StoredObject) -> bool:
        folder = self._marks(stored.key)
        known = {referrer.digest() for referrer in stored.referrers}
        if folder.is_dir() and {mark.name for mark in folder.iterdir()} - known:
            return False  # a conversation stored it since the inventory: it stays
        self._object(stored.key).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        return True

    async def release(self, stored: StoredObject, referrers: list[Referrer]) -> None:
        await asyncio.to_thread(self._release, stored.key, referrers)

    def _release(self, digest: str, referrers: list[Referrer]) -> None:
        for referrer in referrers:
            (self._marks(digest) / referrer.digest()).unlink(missing_ok=True)

    def _record(self, referrer: Referrer) -> Path:
        return self._root / "collected" / referrer.digest()

    async def record_collected(self, referrer: Referrer, collected: Collected) -> None:
        path = self._record(referrer)
        if not path.exists():
            await asyncio.to_thread(_write_atomically, path, collected.to_json())

    async def collected(self, referrer: Referrer) -> Collected | None:
        try:
            raw = await asyncio.to_thread(self._record(referrer).read_bytes)
        except FileNotFoundError:
            return None
        return Collected.from_json(raw)
