"""The boundary contracts: LangChain messages survive pydantic_data_converter (style.md's
round-trip test), and ConversationStart refuses what must never start a conversation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field, ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

from parley.contracts import (
    CallModelOutput,
    ContextRef,
    ConversationSnapshot,
    ConversationStart,
    ConversationState,
    Counters,
    Decision,
    PayloadConverter,
    PendingCall,
    ToolErrorInfo,
    ToolResult,
    TurnResult,
)
from parley.storage import TranscriptSegment
from parley.tools import ToolRegistry, confirm

TOOL_CALLS = [
    {"name": "write_record", "args": {"title": "Q3", "tags": ["a", "b"]}, "id": "c1"},
    {"name": "read_records", "args": {}, "id": "c2"},
]


def proposal() -> AIMessage:
    return AIMessage(content="I will write it.", tool_calls=TOOL_CALLS, id="m1")


def answer() -> ToolMessage:
    return ToolMessage(
        content="Error: count must be at most 10\n Please fix your mistakes.",
        tool_call_id="c1",
        name="write_record",
        status="error",
        artifact={"status": "error", "content": "...", "payload": {"n": 1}, "error": None},
        id="result-c1",
    )


def round_trip(value: Any) -> Any:
    converter = pydantic_data_converter.payload_converter
    payloads = converter.to_payloads([value])
    (back,) = converter.from_payloads(payloads, [type(value)])
    return back


def assert_tool_calls_intact(message: BaseMessage) -> None:
    assert isinstance(message, AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in message.tool_calls] == [
        (c["name"], c["args"], c["id"]) for c in TOOL_CALLS
    ]


def transcript() -> list[BaseMessage]:
    return [HumanMessage(content="write Q3", id="h1"), proposal(), answer()]


def test_transcript_segment_keeps_tool_calls_and_tool_results() -> None:
    back = round_trip(TranscriptSegment(messages=transcript()))

    assert [type(m) for m in back.messages] == [HumanMessage, AIMessage, ToolMessage]
    assert_tool_calls_intact(back.messages[1])
    result = back.messages[2]
    assert (result.tool_call_id, result.status, result.name) == ("c1", "error", "write_record")
    assert result.artifact == answer().artifact
    assert result.content == answer().content


def test_call_model_output_keeps_tool_calls() -> None:
    ref = ContextRef(claim={"sha256": "0" * 64}, length=2)
    back = round_trip(CallModelOutput(message=proposal(), context=ref))
    assert back.context == ref

    assert_tool_calls_intact(back.message)
    assert back.message.id == "m1"


def test_conversation_state_and_snapshot_keep_the_transcript() -> None:
    state = ConversationState(session_id="s1", user_id="alice", transcript=transcript())
    snapshot = ConversationSnapshot(
        session_id="s1",
        user_id="alice",
        status="awaiting_approval",
        pending=[
            PendingCall(
                tool_call_id="c1",
                name="write_record",
                args={"title": "Q3"},
                description="Write a record.",
                expires_at=datetime(2026, 1, 2, tzinfo=UTC),
            )
        ],
        transcript=transcript(),
        audit=[],
        counters=Counters(turns=1, model_calls=1),
        event_count=7,
    )

    for back in (round_trip(state).transcript.messages, round_trip(snapshot).transcript):
        assert [type(m) for m in back] == [HumanMessage, AIMessage, ToolMessage]
        assert_tool_calls_intact(back[1])
        assert back[2].artifact == answer().artifact
        assert back[2].status == "error"
    assert round_trip(snapshot).pending == snapshot.pending


def test_a_base_message_list_would_drop_tool_calls() -> None:
    """Why the contracts say list[AnyMessage]: list[BaseMessage] loses the calls."""

    class Careless(BaseModel):
        messages: list[BaseMessage]

    back = round_trip(Careless(messages=[proposal()]))

    assert not isinstance(back.messages[0], AIMessage)
    assert getattr(back.messages[0], "tool_calls", []) == []


@pytest.mark.parametrize("user_id", ["", "  ", "default", "DEFAULT"])
def test_conversation_start_refuses_a_missing_or_default_user(user_id: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ConversationStart(session_id="s1", user_id=user_id)
    assert "user" in str(refused.value)


@pytest.mark.parametrize(
    "session_id", ["", "a b", "a/b", "x" * 129, "é", "abc\n", "abc\r\n", "\nabc", "abc\x00"]
)
def test_conversation_start_refuses_a_malformed_session_id(session_id: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ConversationStart(session_id=session_id, user_id="alice")
    assert "session id" in str(refused.value)


@pytest.mark.parametrize(
    "user_id", [" alice ", "al ice", "alice\n", "alice\t", "a\x00b", "bob\x85", "u" * 129]
)
def test_conversation_start_refuses_a_malformed_user_id(user_id: str) -> None:
    with pytest.raises(ValidationError, match="no spaces or control characters"):
        ConversationStart(session_id="s1", user_id=user_id)


def test_conversation_start_accepts_a_well_formed_start() -> None:
    start = ConversationStart(
        session_id="Sess.1_a-b", user_id="alice@example.com", pending_expiry_seconds=60
    )
    assert (start.user_id, start.pending_expiry_seconds) == ("alice@example.com", 60)
    assert round_trip(start) == start
    assert ConversationStart(session_id="s", user_id="張三").user_id == "張三"


def test_decisions_that_cannot_be_carried_out_are_refused() -> None:
    with pytest.raises(ValidationError, match="needs new args"):
        Decision(tool_call_id="c1", action="edit")
    with pytest.raises(ValidationError, match="needs a message"):
        Decision(tool_call_id="c1", action="respond", message=" ")


def test_a_payload_leaves_out_empty_fields_and_reads_back_the_same() -> None:
    converter = PayloadConverter()
    result = TurnResult(status="completed", reply="done")
    [payload] = converter.to_payloads([result])
    assert json.loads(payload.data) == {"status": "completed", "reply": "done"}
    assert converter.from_payloads([payload], [TurnResult]) == [result]
    # What users read (``--json``, events) keeps every key.
    assert json.loads(result.model_dump_json()) == {
        "status": "completed",
        "reply": "done",
        "pending": [],
        "results": [],
        "error": None,
        "usage": None,
        "notice": None,
    }


def test_a_tool_error_keeps_its_four_keys_even_in_a_payload() -> None:
    result = ToolResult(
        status="error", content="Error: no", error=ToolErrorInfo(type="ToolFailed", message="no")
    )
    [payload] = PayloadConverter().to_payloads([result])
    assert json.loads(payload.data)["error"] == {
        "type": "ToolFailed",
        "message": "no",
        "http_status": None,
        "body": None,
    }


def test_a_tool_schema_loses_its_labels_not_a_property_named_title() -> None:
    class Args(BaseModel):
        title: str = Field(description="the plan's title")
        meta: dict[str, str] = Field(default={"title": "kept"})

    @tool(args_schema=Args)
    def write_plan(title: str, meta: dict[str, str]) -> str:
        """Write a plan."""
        return title

    schema = ToolRegistry([confirm(write_plan)]).catalogue().get("write_plan").args_schema
    assert "title" not in schema and "description" not in schema
    assert schema["properties"]["title"] == {"description": "the plan's title", "type": "string"}
    assert "title" not in schema["properties"]["meta"]
    assert schema["properties"]["meta"]["default"] == {"title": "kept"}  # data, not a label
    assert schema["required"] == ["title"]


def test_a_result_whose_content_is_its_payload_json_carries_it_once() -> None:
    converter = PayloadConverter()
    payload = {"rows": [{"id": 1, "name": "é"}], "total": 1.5}
    result = ToolResult(
        status="success", content=json.dumps(payload, ensure_ascii=False), payload=payload
    )
    [stored] = converter.to_payloads([result])
    assert "content" not in json.loads(stored.data)
    assert converter.from_payloads([stored], [ToolResult]) == [result]
    # A content that says something else is kept.
    other = ToolResult(status="success", content="1 row", payload=payload)
    [stored] = converter.to_payloads([other])
    assert converter.from_payloads([stored], [ToolResult]) == [other]


def test_a_tool_result_is_carried_once_in_a_payload() -> None:
    """A tool message whose content is its payload's JSON leaves the content out of a
    payload and gets it back on reading; one whose content differs (a long result cut for
    the model) keeps it; what users read (``model_dump_json``) keeps every key."""
    from parley.contracts import PayloadConverter
    from parley.contracts.model import CallModelInput

    payload = {"written": "Q3", "note": "é"}
    whole = ToolMessage(
        content=json.dumps(payload, ensure_ascii=False),
        tool_call_id="c1",
        artifact={"status": "success", "payload": payload},
    )
    cut = ToolMessage(
        content="written (cut)",
        tool_call_id="c2",
        artifact={"status": "success", "payload": payload},
    )
    request = CallModelInput(new_messages=[whole, cut])
    [encoded] = PayloadConverter().to_payloads([request])
    carried = json.loads(encoded.data)["new_messages"]
    assert "content" not in carried[0] and carried[1]["content"] == "written (cut)"
    assert encoded.data.count(b"Q3") == 2  # once per message: in each artifact
    [back] = PayloadConverter().from_payloads([encoded], [CallModelInput])
    assert back == request
    assert json.loads(request.model_dump_json())["new_messages"][0]["content"] == whole.content
