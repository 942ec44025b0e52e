"""The local-directory payload store: content-addressed files under one directory.

Outside the workflow sandbox (worker, activities, clients). For ``parley dev``, tests and
single-host deployments.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)


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
