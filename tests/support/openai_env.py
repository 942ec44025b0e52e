"""A local OpenAI-protocol server (``FakeOpenAI``) that the worker's real langchain-openai
client is pointed at. Test support, registered as a plugin in tests/conftest.py: its
``fake`` fixture is the test's own FakeOpenAI, with the environment pointing at it; a
module's ``pytestmark = pytest.mark.fake_openai(**options)`` (or a test's mark) passes
options to it (``api_key``, ``context_window``, ``responder``, ``ignore_stream``,
``chunk_delay``). A module that runs another provider defines its own ``fake``
(``shared_server`` in tests.support.provider_runs). Client side (runs in the test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from parley.activities.models.openai_provider import build_openai_model
from parley.config.settings import Settings
from parley.tools.loading import ModelConfig
from tests.support.openai_fake import FakeOpenAI
from tests.support.provider_runs import THIRTY_WORDS, aim_at

__all__ = ["OPENAI_KEY", "THIRTY_WORDS", "fake", "openai_model", "serving_openai", "stored_reply"]

#: The fake's key, unless a ``fake_openai`` mark names another.
OPENAI_KEY = "sk-openai-test-0123456789"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fake_openai(**options): the options of the test's FakeOpenAI (``fake``)"
    )


@pytest.fixture
def fake(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The test's own FakeOpenAI (options from the nearest ``fake_openai`` mark), with the
    client's key and URL variables set to its own and the default overload codes."""
    mark = request.node.get_closest_marker("fake_openai")
    options: dict[str, Any] = {"api_key": OPENAI_KEY, **(mark.kwargs if mark else {})}
    with FakeOpenAI(**options) as running:
        aim_at(monkeypatch, running)
        monkeypatch.delenv("PARLEY_MODEL_OVERLOAD_CODES", raising=False)
        yield running


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
