"""What the Temporal UI shows: search attributes kept current, a static summary, current
details listing the pending calls, and a summary on every activity."""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from parley.contracts import PARLEY_PENDING_TOOLS, PARLEY_STATUS, PARLEY_USER, Decision
from parley.worker.wiring import ensure_search_attributes
from tests.support import call, registry, script


async def test_search_attributes_summaries_and_details(parley_worker, client: Client) -> None:
    model = script(
        {"content": "", "tool_calls": [call("write_record", "c1", title="Q3 review")]},
        {"content": "done"},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = f"ui-{uuid.uuid4().hex[:8]}"
        await conversations.send(sid, "dora", "write it")
        handle = conversations.handle(sid)

        described = await handle.describe()
        attributes = described.typed_search_attributes
        assert attributes.get(PARLEY_USER) == "dora"
        assert attributes.get(PARLEY_STATUS) == "awaiting_approval"
        assert attributes.get(PARLEY_PENDING_TOOLS) == ["write_record"]
        assert await described.static_summary() == f"Parley conversation {sid}"

        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "write_record" in metadata.current_details
        assert "Q3 review" in metadata.current_details and "`c1`" in metadata.current_details

        await conversations.decide(sid, "dora", [Decision(tool_call_id="c1", action="approve")])
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(PARLEY_STATUS) == "idle"
        assert not attributes.get(PARLEY_PENDING_TOOLS)  # an empty list reads back unset

        scheduled = [
            event.activity_task_scheduled_event_attributes.activity_type.name
            + ": "
            + (
                client.data_converter.payload_converter.from_payload(
                    event.user_metadata.summary, str
                )
                if event.user_metadata.HasField("summary")
                else "-"
            )
            async for event in handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        # Every activity says what it does: a tool call its arguments, a model call the
        # model it asks for (none chosen: the worker's first listed).
        assert scheduled == [
            "parley.call_model: default model",
            "parley.run_tool: write_record title=Q3 review",
            "parley.call_model: default model",
        ]


async def test_ensure_search_attributes_is_idempotent(client: Client) -> None:
    await ensure_search_attributes(client, "default")
    await ensure_search_attributes(client, "default")
