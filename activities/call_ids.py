"""A reply's ids made Parley's: the message's, and every tool call's unique in the
conversation, its subagents and its rewinds (``call_model`` gives them). Activity side;
moved out of ``model_calls`` whole.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from parley.contracts import REWOUND_CALL_ID, SUBAGENT_CALL_PREFIX
from parley.contracts.limits import CALL_ID_MAX_CHARS


def _with_unique_ids(
    reply: AIMessage,
    message_id: str,
    transcript_length: int,
    used: set[str],
    subagent: str | None = None,
    rewinds: int = 0,
) -> AIMessage:
    """Give the message an id of Parley's and every tool call (valid or not) an id
    unique in the conversation and its subagents, over all its life. Some providers omit
    ids, some (Ollama, vLLM) restart at ``call_0`` every turn, and a subagent's model
    numbers its calls as its parent's does; the gate, a decision's update id and the
    idempotency key ``<workflow_id>:<tool_call_id>`` address calls by id, so a shared id
    would answer one call with another's decision. ``used``: the ids in the transcript;
    ``rewinds``: how often it was cut, each cut a namespace of its own (``r<n>.``), so an
    id cut away is never given again. ``subagent``: the conversation's ``<name>-<n>``."""
    base = f"m{transcript_length}"
    prefix = f"{SUBAGENT_CALL_PREFIX}{subagent}-" if subagent else f"r{rewinds}." if rewinds else ""
    counter = iter(range(len(reply.tool_calls) + len(reply.invalid_tool_calls)))

    def unique(call: Any) -> Any:
        call_id = call.get("id") or ""
        index = next(counter)
        if len(call_id) > CALL_ID_MAX_CHARS:
            call_id = ""  # ids live in pending calls, the audit log, idempotency keys
        if not subagent and (
            call_id.startswith(SUBAGENT_CALL_PREFIX) or REWOUND_CALL_ID.match(call_id)
        ):
            call_id = ""  # Parley's own namespaces
        if call_id:
            call_id = f"{prefix}{call_id}"
        k = 0
        while not call_id or call_id in used:
            call_id = f"{prefix}call_{base}_{index}" + (f".{k}" if k else "")
            k += 1
        used.add(call_id)
        if call.get("id") and call["id"] != call_id:
            renamed[call["id"]] = call_id
        return {**call, "id": call_id}

    renamed: dict[str, str] = {}
    calls = [unique(c) for c in reply.tool_calls]
    invalid = [unique(c) for c in reply.invalid_tool_calls]
    return reply.model_copy(
        update={
            "id": message_id,
            "tool_calls": calls,
            "invalid_tool_calls": invalid,
            "content": _renamed_parts(reply.content, renamed),
            "additional_kwargs": _renamed_signatures(reply.additional_kwargs, renamed),
        }
    )


def _renamed_parts(content: Any, renamed: dict[str, str]) -> Any:
    """A provider's own ``tool_use`` parts (Anthropic's) under their calls' new ids: the
    client sends a part and a call of different ids as two calls, one never answered."""
    if not renamed or not isinstance(content, list):
        return content
    return [
        {**part, "id": renamed[part["id"]]}
        if isinstance(part, dict) and part.get("type") == "tool_use" and part.get("id") in renamed
        else part
        for part in content
    ]


#: Where langchain-google-genai keeps Gemini's ``thoughtSignature`` of each function
#: call, by call id; it sends a signature back only with the call of that id.
GEMINI_SIGNATURES = "__gemini_function_call_thought_signatures__"


def _renamed_signatures(kwargs: dict[str, Any], renamed: dict[str, str]) -> dict[str, Any]:
    """Gemini's thought signatures under their calls' new ids: a call sent back without
    its signature loses the model's reasoning (for Gemini 3, langchain-google-genai
    then sends a placeholder that tells the API to skip its check)."""
    signatures = kwargs.get(GEMINI_SIGNATURES)
    if not renamed or not isinstance(signatures, dict):
        return kwargs
    return {**kwargs, GEMINI_SIGNATURES: {renamed.get(k, k): v for k, v in signatures.items()}}
