"""A local OpenAI-protocol server (``FakeOpenAI``) that the worker's real langchain-openai
client is pointed at, as the streaming, context, spending and AG-UI client tests use it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from parley.activities.models.openai_provider import build_openai_model
from parley.config.settings import Settings
from parley.tools.loading import ModelConfig
from tests.support.openai_fake import FakeOpenAI
from tests.support.provider_runs import THIRTY_WORDS

__all__ = ["THIRTY_WORDS", "openai_model", "serving_openai", "stored_reply"]


@asynccontextmanager
async def serving_openai(
    monkeypatch: pytest.MonkeyPatch, api_key: str, **options: Any
) -> AsyncIterator[FakeOpenAI]:
    """The server, with ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` pointing at it."""
    async with FakeOpenAI(api_key=api_key, **options) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", api_key)
        yield running


def openai_model() -> Any:
    """The worker's model as ``PARLEY_MODEL=openai:gpt-test`` builds it."""
    return build_openai_model(ModelConfig.from_settings(Settings.from_env(), "gpt-test"))


def stored_reply(snapshot: Any) -> AIMessage:
    """The latest assistant message of a conversation's snapshot."""
    return [m for m in snapshot.transcript if isinstance(m, AIMessage)][-1]
