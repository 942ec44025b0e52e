"""A tool whose arguments are not all text, for the policy-file tests: ``deploy_service``
takes an environment from an enum and a boolean ``force``, so a rule's pattern can be
one that no value of them matches. Loaded by a test's worker, or by a ``parley tools`` /
``parley worker`` process through ``PARLEY_TOOLS=tests.support.typed_tools:toolset``.
Worker side (its body runs in the ``run_tool`` activity)."""

from __future__ import annotations

from typing import Annotated, Literal

from langchain_core.tools import InjectedToolArg, tool

from parley.contracts import ToolContext
from parley.tools import confirm
from tests.support.recording_tools import RUNS


@tool
async def deploy_service(
    service: str,
    environment: Literal["staging", "production"],
    context: Annotated[ToolContext, InjectedToolArg],
    force: bool = False,
) -> dict:
    """Deploy a service to an environment (changes the world)."""
    RUNS.append({"tool": "deploy_service", "key": context.idempotency_key, "service": service})
    return {"deployed": service, "environment": environment, "force": force}


def toolset() -> list:
    return [confirm(deploy_service)]
