"""``PARLEY_MODEL=anthropic:<model>``: Claude through Anthropic's Messages API
(``langchain-anthropic``).

Activity side only: the key (``ANTHROPIC_API_KEY``) comes in the model's own config
(``parley.tools.loading.ModelConfig``, made from the Settings the worker read at start), so it
lives in the worker process and never enters workflow input or history.
``ANTHROPIC_BASE_URL`` points at another endpoint (a proxy, a gateway, a local server).

As for ``openai:``: the SDK's own retries are off (``max_retries=0``), Temporal's retry
policy for the model activity is the only retry loop and
``parley.activities.models.failures`` decides what it retries; replies are read as a
stream (``call_model`` uses ``astream``: text deltas as they arrive, tool calls assembled
from their ``input_json_delta`` pieces) with usage in the stream (``message_delta``
carries input, output, cache-read and cache-write tokens).

Prompt caching: the stable prefix of every request, the tool catalogue and the system
prompt (Anthropic's cache reads tools, then system, then messages), is marked
``cache_control: {"type": "ephemeral"}`` on its last tool and its last system block, so a
conversation's later calls read it from the cache (``cache_read_input_tokens``, in
Parley's usage as ``cache_read_tokens``) instead of paying for it in full again.
Anthropic ignores the mark on a prefix shorter than the model's minimum (about 1,024
tokens).
"""

from __future__ import annotations

from typing import Any

from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel

from parley.tools.loading import ModelConfig

#: Anthropic's own endpoint, given explicitly so that the client reads no environment.
DEFAULT_BASE_URL = "https://api.anthropic.com"
EPHEMERAL = {"type": "ephemeral"}


class CachingChatAnthropic(ChatAnthropic):
    """``ChatAnthropic`` whose requests mark their stable prefix for prompt caching."""

    def _get_request_payload(self, input_: Any, *, stop: Any = None, **kwargs: Any) -> dict:
        # langchain-anthropic's one hook where the request body is whole (tools already
        # in Anthropic's format, system messages hoisted); tests read the body the
        # server received, so a release that moves it fails loudly.
        return with_cached_prefix(super()._get_request_payload(input_, stop=stop, **kwargs))


def with_cached_prefix(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with ``cache_control`` on its last tool and last system text block
    (copies: the bound tools are shared by every call). A prefix the caller already
    marked is left as it is."""
    tools = payload.get("tools")
    if isinstance(tools, list) and tools and _unmarked(tools[-1]):
        payload["tools"] = [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}]
    system = payload.get("system")
    if isinstance(system, str) and system.strip():
        payload["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    elif isinstance(system, list) and system and _unmarked(system[-1]):
        if system[-1].get("type") == "text" and system[-1].get("text"):
            payload["system"] = [*system[:-1], {**system[-1], "cache_control": EPHEMERAL}]
    return payload


def _unmarked(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" not in block


def build_anthropic_model(config: ModelConfig) -> BaseChatModel:
    """A ``ChatAnthropic`` (prompt caching on) for the model ``config`` names.

    ``ANTHROPIC_API_KEY`` is required; ``ANTHROPIC_BASE_URL`` is optional (Anthropic's
    API when unset); ``PARLEY_MODEL_TIMEOUT_SECONDS`` bounds one HTTP request (default
    120).
    """
    model_name = (config.name or "").strip()
    if not model_name:
        raise ValueError(
            "anthropic: needs a model name, e.g. PARLEY_MODEL=anthropic:claude-sonnet-4-5"
        )
    if not config.api_key.strip():
        raise ValueError(
            "ANTHROPIC_API_KEY is not set: set it in the worker's environment to use "
            f"PARLEY_MODEL=anthropic:{model_name}"
        )
    return CachingChatAnthropic(
        model=model_name,
        api_key=config.api_key,
        base_url=config.base_url or DEFAULT_BASE_URL,
        max_retries=0,
        timeout=config.timeout_seconds,
        # ``call_model`` reads every reply with ``astream``; the usage (input, output,
        # cache reads and writes) comes in the stream's ``message_delta``.
        stream_usage=True,
    )
