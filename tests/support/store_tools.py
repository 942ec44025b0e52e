"""Tools for the payload store's tests (``tests/test_store_*.py``), loaded by real
worker processes through ``PARLEY_TOOLS=tests.support.store_tools:toolset`` or
registered in an in-process worker: a large page (claim-checked) and a small echo (many
calls make a long transcript). Both harmless, so they run without confirmation."""

from __future__ import annotations

from langchain_core.tools import tool

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
