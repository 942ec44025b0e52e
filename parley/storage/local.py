"""The local-directory payload store: content-addressed files under one directory.

Outside the workflow sandbox (worker, activities, clients). For ``parley dev``, tests and
single-host deployments. A directory named by ``PARLEY_PAYLOAD_STORE`` (or the default)
holds a part per cluster and namespace (``clusters``), ``<cluster id>/<namespace>/``,
each laid out as below, with its marker ``part.json``; what was written before parts
(and what a store built on a directory alone writes) is laid out so at the top. A
claim names its part (``part``), so any reader of the directory reads it; a claim that
names none is looked for in the reader's own part, then at the top, then in every other
part (the transcript chain's claims leave the reader's part out, ``transcripts``): an
object's name is its SHA-256, so wherever it is found it is the bytes claimed. Layout
under a part's root:

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

from parley.storage.base import (
    UNSPLIT,
    Collected,
    PayloadStore,
    Referrer,
    StoredObject,
    Tally,
    referrer_of,
)
from parley.storage.clusters import MARKER, checked_segment, read_marker

_HEX = frozenset("0123456789abcdef")
#: What the top of a directory holds besides parts: the layout before parts.
_UNSPLIT_FOLDERS = frozenset({"refs", "referrers", "collected"})


def _is_object_folder(folder: Path) -> bool:
    return len(folder.name) == 2 and set(folder.name) <= _HEX and folder.is_dir()


def _part_roots(base: Path) -> list[Path]:
    """Every part's root under the directory ``base`` (``<cluster>/<namespace>``)."""
    roots = []
    for cluster in sorted(base.iterdir()) if base.is_dir() else ():
        if (
            cluster.name.startswith(".")
            or cluster.name in _UNSPLIT_FOLDERS
            or _is_object_folder(cluster)
            or not cluster.is_dir()  # a file, or a link to a folder gone
        ):
            continue
        roots.extend(sorted(p for p in cluster.iterdir() if p.is_dir()))
    return roots


def _tally_objects(root: Path) -> tuple[int, int]:
    """How many objects the part at ``root`` holds, and their bytes."""
    count = size = 0
    for folder in root.iterdir() if root.is_dir() else ():
        if _is_object_folder(folder):
            for path in folder.iterdir():
                if not path.name.startswith(".tmp-"):
                    try:
                        size += path.stat().st_size
                    except FileNotFoundError:
                        continue
                    count += 1
    return count, size


def _when(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _write_atomically(path: Path, data: bytes) -> None:
    """A reader sees the whole file or none: a temporary file, then ``os.replace``."""
    try:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except FileNotFoundError:  # the folder's first file (asked only then: a syscall less)
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

    def __init__(
        self,
        root: str | os.PathLike[str],
        name: str = "parley-local-file",
        *,
        part: str | None = None,
    ) -> None:
        """Files under ``root``, or under its part ``part`` (``<cluster>/<namespace>``,
        ``clusters.ClusterPart.segment``), whose claims say so."""
        self._base = Path(root)
        self._part = checked_segment(part) if part else None
        self._root = self._base / part if part else self._base
        self._name = name

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return "parley.local-file"

    def home(self) -> str | None:
        return self._part

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
            claim = {"sha256": digest, **({"part": self._part} if self._part else {})}
            claims.append(StorageDriverClaim(claim_data=claim))
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
            # The claim's part (any reader of the directory reads any part's claims).
            part = claim.claim_data.get("part")
            root = self._base / checked_segment(part) if part else self._base
            blob = self._read(digest, root) if part else self._find(digest)
            if blob is None:
                raise FileNotFoundError(
                    f"payload {digest} is not in the store at {root}: every worker and "
                    "client must use the same PARLEY_PAYLOAD_STORE"
                )
            if hashlib.sha256(blob).hexdigest() != digest:
                # As the S3 driver does: a damaged file is never taken for the payload.
                raise ValueError(
                    f"payload {digest} in the store at {root} is damaged: its content "
                    "does not match its SHA-256"
                )
            payload = Payload()
            payload.ParseFromString(blob)
            payloads.append(payload)
        return payloads

    @staticmethod
    def _read(digest: str, root: Path) -> bytes | None:
        try:
            return (root / digest[:2] / digest).read_bytes()
        except FileNotFoundError:
            return None

    def _find(self, digest: str) -> bytes | None:
        """A claim that names no part: this store's own part first (the transcript
        chain's claims, ``transcripts``), then the top (written before parts), then the
        other parts (a reader of another part, or of none: the CLI reading a chain)."""
        for root in dict.fromkeys((self._root, self._base)):
            if (blob := self._read(digest, root)) is not None:
                return blob
        for root in _part_roots(self._base):
            if root != self._root and (blob := self._read(digest, root)) is not None:
                return blob
        return None

    # --- retention -------------------------------------------------------------------

    async def inventory(self) -> list[StoredObject]:
        return await asyncio.to_thread(self._inventory)

    def _inventory(self) -> list[StoredObject]:
        found = []
        identities: dict[str, Referrer | None] = {}
        if not self._root.is_dir():
            return []
        for folder in sorted(self._root.iterdir()):
            if not _is_object_folder(folder):
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

    # --- the parts of the directory (a store of parts reads them here) -----------------

    async def write_marker(self, segment: str, marker: bytes) -> None:
        path = self._base / checked_segment(segment) / MARKER
        await asyncio.to_thread(_write_atomically, path, marker)

    async def tally(self) -> list[Tally]:
        return await asyncio.to_thread(self._tally)

    def _tally(self) -> list[Tally]:
        """Every part of the directory with its objects, as its marker names it, and
        what was written before parts (``UNSPLIT``)."""
        found = []
        objects, size = _tally_objects(self._base)
        if objects:
            found.append(Tally(UNSPLIT, objects, size))
        for root in _part_roots(self._base):
            objects, size = _tally_objects(root)
            try:
                who = read_marker((root / MARKER).read_bytes())
            except OSError:
                who = None
            found.append(Tally.marked(f"{root.parent.name}/{root.name}", objects, size, who))
        return found
