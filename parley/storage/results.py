"""Whole tool results: the results the model and the previews saw cut, kept as one object
each in the payload store, so ``parley result`` and ``GET …/results/{call_id}`` give them
back whole from any host that shares the store.

Outside the workflow sandbox: the worker's ``run_tool`` activity keeps a result (when
``must_keep`` says it is longer than a preview of it) and returns the small
``StoredResult`` claim; clients read it back (``parley.client.results``). An object is
stored under its conversation's workflow id, so retention (``parley.storage.retention``)
keeps it exactly as long as the transcript that refers to it.
"""

from __future__ import annotations

from temporalio.converter import (
    StorageDriver,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from parley.contracts import MODEL_RESULT_MAX_CHARS, PayloadConverter, StoredResult, ToolResult
from parley.contracts.errors import ErrorType
from parley.contracts.limits import PAYLOAD_PREVIEW_BYTES
from parley.storage.transcripts import read_stored


def must_keep(result: ToolResult) -> bool:
    """Whether some reader sees ``result`` cut: content over what the model reads, or a
    payload the previews leave out. (A result over the worker's byte limit is already an
    error envelope holding its beginning: there is no whole to keep.)"""
    if result.error is not None and result.error.type == ErrorType.RESULT_TOO_LARGE:
        return False
    if len(result.content) > MODEL_RESULT_MAX_CHARS:
        return True
    if result.payload is None:
        return False
    return len(PayloadConverter().to_payloads([result.payload])[0].data) > PAYLOAD_PREVIEW_BYTES


class WholeResults:
    def __init__(self, driver: StorageDriver) -> None:
        self._driver = driver
        self._converter = PayloadConverter()

    async def keep(self, result: ToolResult, *, workflow_id: str, namespace: str) -> StoredResult:
        """Store ``result`` whole for conversation ``workflow_id``; its claim."""
        payload = self._converter.to_payloads([result])[0]
        context = StorageDriverStoreContext(
            target=StorageDriverWorkflowInfo(namespace=namespace, id=workflow_id)
        )
        [claim] = await self._driver.store(context, [payload])
        return StoredResult(
            claim=dict(claim.claim_data),
            content_chars=len(result.content),
            bytes=len(payload.data),
        )

    async def read(self, stored: StoredResult) -> ToolResult:
        """The whole result back; a store that cannot give it raises
        ``StoredObjectUnreadable`` (a ``ValueError``) saying so."""
        return await read_stored(self._driver, stored.claim, ToolResult, "tool result")
