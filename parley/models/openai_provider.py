"""``PARLEY_MODEL=openai:<model>``: any OpenAI-compatible chat-completions server.

Activity side only: this module reads ``OPENAI_API_KEY`` from the worker's environment,
so the key lives in the worker process and never enters workflow input or history.
Works for OpenAI, DeepSeek, vLLM, Ollama and anything else speaking the protocol
(``OPENAI_BASE_URL`` points at it).

The SDK's own retries are off (``max_retries=0``): Temporal's retry policy for the model
activity is the only retry loop, and ``parley.models.failures`` decides what it retries.
"""

from __future__ import annotations

import os

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI

DEFAULT_TIMEOUT_SECONDS = 120.0


def build_openai_model(model_name: str) -> BaseChatModel:
    """A ``ChatOpenAI`` for ``model_name`` configured from the environment.

    ``OPENAI_API_KEY`` is required (servers that ignore keys, such as a local Ollama,
    accept any non-empty value); ``OPENAI_BASE_URL`` is optional (OpenAI when unset);
    ``PARLEY_MODEL_TIMEOUT_SECONDS`` bounds one HTTP request (default 120).
    """
    if not model_name or not model_name.strip():
        raise ValueError("openai: needs a model name, e.g. PARLEY_MODEL=openai:gpt-4o-mini")
    api_key = os.environ.get("OPENAI_API_KEY", "")
    if not api_key.strip():
        raise ValueError(
            "OPENAI_API_KEY is not set: set it in the worker's environment to use "
            f"PARLEY_MODEL=openai:{model_name} (any non-empty value for servers that do "
            "not check keys, such as a local Ollama or vLLM)"
        )
    base_url = os.environ.get("OPENAI_BASE_URL") or None
    return ChatOpenAI(
        model=model_name.strip(),
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=_timeout_seconds(),
        streaming=False,
        # Chat completions is what DeepSeek, vLLM and Ollama speak; never switch to
        # OpenAI's Responses API by model name.
        use_responses_api=False,
    )


def _timeout_seconds() -> float:
    raw = os.environ.get("PARLEY_MODEL_TIMEOUT_SECONDS", "")
    if not raw.strip():
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"PARLEY_MODEL_TIMEOUT_SECONDS={raw!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"PARLEY_MODEL_TIMEOUT_SECONDS must be positive, got {raw!r}")
    return value
