"""The client side of the tests that drive a real provider client against a fake provider
(``FakeOpenAI``, ``FakeAnthropic``, ``FakeGemini``). Test support.

- ``point_at`` (``aim_at``, without clearing the fake): the environment that sends
  Parley's client to a fake, with its key;
- ``shared_server``: a module's ``server`` fixture (one fake for the module) and its
  ``fake`` fixture (that server, afresh for each test, the environment pointing at it);
- ``worker_model``: the worker's model as a ``PARLEY_MODEL`` spec builds it;
- ``one_turn``, ``streamed_turn``, ``read_four_reports`` (with the ``fetch_report``
  tool): conversations through a worker (the ``parley_worker`` fixture), as ``USER``;
  ``script_a_write``: a fake's replies for a write through the gate; ``add``: a tool;
- ``openai_usage``, ``anthropic_usage``, ``gemini_usage``: what a fake reported, as
  Parley counts it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, TypeVar

import pytest
from langchain_core.tools import InjectedToolArg, tool

from parley.activities.models import build_chat_model
from parley.config.settings import Settings
from parley.contracts import ToolContext, Usage
from parley.observability.redaction import remember_config
from parley.tools import auto
from parley.tools.loading import ModelAccess
from tests.support import registry
from tests.support.anthropic_fake import FakeAnthropic
from tests.support.fake_provider import FakeProvider
from tests.support.gemini_fake import FakeGemini
from tests.support.openai_fake import FakeOpenAI
from tests.support.plans import fetch
from tests.support.transcripts import new_session

Fake = TypeVar("Fake", bound=FakeProvider)

#: The user of the conversations the helpers below run.
USER = "alice"
#: A reply of 30 words, streamed a word at a time by the provider.
THIRTY_WORDS = " ".join(f"word{i}" for i in range(30)) + "."

#: Per fake: the variables of its key and its URL, and any the client would read instead.
ENVIRONMENT: dict[type[FakeProvider], tuple[str, str, tuple[str, ...]]] = {
    FakeOpenAI: ("OPENAI_API_KEY", "OPENAI_BASE_URL", ("OPENAI_API_BASE",)),
    FakeAnthropic: ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ()),
    FakeGemini: ("GOOGLE_API_KEY", "GOOGLE_BASE_URL", ()),
}


def point_at(monkeypatch: pytest.MonkeyPatch, fake: Fake) -> Fake:
    """``fake``, cleared, with the client's key and URL variables set to its own, no
    proxy for 127.0.0.1 and the default model timeout."""
    fake.clear()
    return aim_at(monkeypatch, fake)


def aim_at(monkeypatch: pytest.MonkeyPatch, fake: Fake) -> Fake:
    """``fake`` as it is, with the client's key and URL variables set to its own, no
    proxy for 127.0.0.1 and the default model timeout."""
    key, url, others = ENVIRONMENT[type(fake)]
    monkeypatch.setenv(key, fake.api_key or "")
    monkeypatch.setenv(url, fake.base_url)
    for name in others:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("PARLEY_MODEL_TIMEOUT_SECONDS", raising=False)
    return fake


def shared_server(kind: type[Fake], api_key: str) -> tuple[Any, Any]:
    """A module's fixtures ``server`` (one ``kind`` with ``api_key`` for the module) and
    ``fake`` (that server, pointed at afresh for each test):
    ``server, fake = shared_server(FakeAnthropic, KEY)``."""

    @pytest.fixture(scope="module", name="server")
    def server_fixture() -> Iterator[Fake]:
        with kind(api_key=api_key) as running:
            yield running

    @pytest.fixture(name="fake")
    def fake_fixture(server: Fake, monkeypatch: pytest.MonkeyPatch) -> Fake:
        return point_at(monkeypatch, server)

    return server_fixture, fake_fixture


def worker_model(spec: str) -> Any:
    """The worker's model as ``PARLEY_MODEL=<spec>`` builds it."""
    settings = Settings.from_env()
    remember_config(settings)  # as the worker does at start: its keys are redacted
    return build_chat_model(spec, ModelAccess.from_settings(settings))


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script_a_write(
    fake: FakeOpenAI | FakeAnthropic | FakeGemini, call_id: str | None = None
) -> None:
    """The model's side of writing record Q3 through the gate: the call (with
    ``call_id``, else the provider's own), then the reply once it ran."""
    write: dict[str, Any] = {"name": "write_record", "args": {"title": "Q3"}}
    if call_id is not None:
        write["id"] = call_id
    fake.reply("I will write it.", tool_calls=[write])
    fake.reply("Written: Q3.")


async def one_turn(parley_worker: Any, model: Any, message: str = "hello") -> tuple[Any, Any]:
    """A new conversation's one turn through a worker with ``model``: the turn and the
    conversation's history."""
    sid = new_session()
    async with parley_worker(registry(), model) as conversations:
        turn = await conversations.send(sid, USER, message)
        history = await fetch(conversations, sid)
    return turn, history


async def streamed_turn(parley_worker: Any, model: Any) -> tuple[Any, list[Any], Any]:
    """A new conversation's turn "talk to me": the turn, the AG-UI events of its run and
    the conversation's state."""
    sid = new_session()
    async with parley_worker(registry(), model) as conversations:
        turn = await conversations.send(sid, USER, "talk to me")
        events = [e.event for e in (await conversations.events(sid, USER)).events]
        state = await conversations.state(sid, USER)
    return turn, events, state


@tool
async def fetch_report(day: int, context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """Fetch the day's report (about 20 KB of text)."""
    line = f"day {day}: all systems nominal, nothing to report. "
    return (line * (20 * 1024 // len(line) + 1))[: 20 * 1024]


async def read_four_reports(parley_worker: Any, model: Any) -> Any:
    """Four turns, each asking ``model`` to read a day's report with ``fetch_report``
    (about 20 KB each: past a small window), each completed; the conversation's state."""
    sid = new_session()
    async with parley_worker(registry(auto(fetch_report)), model) as conversations:
        for day in (1, 2, 3, 4):
            turn = await conversations.send(sid, USER, f"read the report of day {day}")
            assert turn.status == "completed", turn.error
        return await conversations.state(sid, USER)


def _reported(
    fake: FakeProvider, calls: slice, keys: tuple[str, str, str], cached: str | None = None
) -> Usage:
    """The usages ``fake`` reported over ``calls``, read by their ``(input, output,
    total)`` keys and the ``cached`` (read) one."""
    inputs, outputs, totals = keys
    total = Usage()
    for u in fake.usage_reported[calls]:
        total += Usage(
            input_tokens=u[inputs],
            output_tokens=u[outputs],
            total_tokens=u[totals],
            model_calls=1,
            cache_read_tokens=(u.get(cached) or 0) if cached else None,
        )
    return total


def openai_usage(fake: FakeOpenAI, calls: slice = slice(None)) -> Usage:
    """What the fake reported over its calls (all, or a slice of them)."""
    return _reported(fake, calls, ("prompt_tokens", "completion_tokens", "total_tokens"))


def gemini_usage(fake: FakeGemini, calls: slice = slice(None)) -> Usage:
    """What the server reported, as Parley counts it: the prompt includes the cache's part."""
    keys = ("promptTokenCount", "candidatesTokenCount", "totalTokenCount")
    return _reported(fake, calls, keys, "cachedContentTokenCount")


def anthropic_usage(fake: FakeAnthropic, calls: slice = slice(None)) -> Usage:
    """What the server reported, as Parley counts it: input includes the cache's part."""
    total = Usage()
    for u in fake.usage_reported[calls]:
        read, written = u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
        inputs = u["input_tokens"] + read + written
        total += Usage(
            input_tokens=inputs,
            output_tokens=u["output_tokens"],
            total_tokens=inputs + u["output_tokens"],
            model_calls=1,
            cache_read_tokens=read,
            cache_write_tokens=written,
        )
    return total
