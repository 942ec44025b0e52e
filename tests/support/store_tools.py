"""Tools for the payload store's tests (``tests/test_store_*.py``), loaded by real
worker processes through ``PARLEY_TOOLS=tests.support.store_tools:toolset`` or
registered in an in-process worker: a large page (claim-checked) and a small echo (many
calls make a long transcript). Both harmless, so they run without confirmation. And
``stored_for``: the context a store is given when a workflow's payload is stored."""

from __future__ import annotations

from langchain_core.tools import tool
from temporalio.converter import StorageDriverStoreContext, StorageDriverWorkflowInfo

from parley.tools import ParleyTool, auto


@tool
async def big_page(n: int, size: int) -> str:
    """Fetch page n of a large document: ``size`` characters."""
    head = f"page {n}: "
    return head + "x" * (size - len(head))


@tool
async def echo(n: int) -> str:
    """Say n back."""
    return f"echo {n}"


def toolset() -> list[ParleyTool]:
    return [auto(big_page), auto(echo)]


def stored_for(workflow_id: str, namespace: str = "default") -> StorageDriverStoreContext:
    """The context of a payload stored for ``workflow_id`` of ``namespace``."""
    return StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace=namespace, id=workflow_id)
    )
