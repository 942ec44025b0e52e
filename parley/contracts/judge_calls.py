"""What the judge is asked (``JudgeCallInput``: the ``parley.judge_call`` activity's input).
Both sides of the Temporal boundary; a pydantic model, no I/O. Apart from
``parley.contracts.judging`` because it carries the call's preview, whose module the
tool results' (which carry a verdict) depend on.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from parley.contracts.judging import ExcerptMessage
from parley.contracts.payloads import Contract
from parley.contracts.policies import PolicyRule
from parley.contracts.previews import ToolPreview


class JudgeCallInput(Contract):
    """``judge_call``: one pending call, its rule, its preview and a bounded excerpt of
    the conversation. The judge's verdict holds only for ``args`` (their ``args_hash``)."""

    tool_call_id: str
    name: str
    args: dict[str, Any]
    args_hash: str
    description: str
    rule: PolicyRule
    excerpt: list[ExcerptMessage] = Field(default_factory=list)
    #: What the call would change (its tool's preview, computed just before), when the
    #: tool declares one: read from the target, so quoted to the judge as untrusted data.
    preview: ToolPreview | None = None
