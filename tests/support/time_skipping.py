"""The time-skipping test server (a pytest plugin, registered in tests/conftest.py):
the ``time_skipping_env`` fixture, on which 24 hours pass in a moment, and a scripted
model that remembers what it was shown (``recording_script``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from parley.activities.models.script_file import ScriptEntry, ScriptFileChatModel
from parley.cli.binaries import temporal_test_server
from parley.contracts import SEARCH_ATTRIBUTES
from parley.storage import LocalFileStorageDriver, data_converter
from parley.worker.wiring import _indexed_type


class RecordingScript(ScriptFileChatModel):
    """The script model, remembering what it was given on every call."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def recording_script(*entries: dict[str, Any]) -> RecordingScript:
    return RecordingScript(entries=[ScriptEntry.model_validate(e) for e in entries], inputs=[])


@pytest.fixture
async def time_skipping_env(
    payload_store: LocalFileStorageDriver,
) -> AsyncIterator[WorkflowEnvironment]:
    """A test server per test (it starts in well under a second): a conversation a test
    leaves behind keeps its deadline timer (``workflows/lifecycle/deadlines.py``), and on
    a shared server that timer ringing for a workflow whose worker is gone would hold the
    next test's skipped clock still."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=temporal_test_server(),
        data_converter=data_converter(driver=payload_store),
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={key.name: _indexed_type(key) for key in SEARCH_ATTRIBUTES},
            ),
            timeout=timedelta(seconds=10),
        )
        yield env
    finally:
        await env.shutdown()
