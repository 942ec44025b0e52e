"""The carried state's split into sub-models: the flat state a run carried
before the split, as the golden history holds it, reads into the sub-models with every
field in its place, and is written back exactly as it was, so a build from before the
split reads what a newer one carries."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from parley.contracts import ConversationStart, ConversationState
from parley.storage import data_converter

CHANNELS_FIXTURE = Path(__file__).parent / "histories" / "signals_expiry_continue_as_new.json"


def carried_states() -> list[dict[str, Any]]:
    """The flat ``carried_state`` of each continued run of the golden history."""
    found = []
    for run in json.loads(CHANNELS_FIXTURE.read_text(encoding="utf-8")):
        started = run["events"][0]["workflowExecutionStartedEventAttributes"]
        payload = started["input"]["payloads"][0]
        start = json.loads(base64.b64decode(payload["data"]))
        if start.get("carried_state"):
            found.append(start["carried_state"])
    return found


def test_the_golden_history_carries_the_flat_state() -> None:
    states = carried_states()
    assert len(states) >= 2
    assert all(isinstance(s["transcript"], list) and "audit_offset" in s for s in states)


def test_a_flat_state_reads_into_its_sub_models_field_by_field() -> None:
    for flat in carried_states():
        state = ConversationState.model_validate(flat)
        assert len(state.transcript.messages) == len(flat["transcript"]) > 0
        assert state.transcript.offset == flat.get("transcript_offset", 0)
        assert state.transcript.model_context is not None
        assert state.transcript.model_context.length == flat["model_context"]["length"]
        assert [a.event for a in state.audit.entries] == [a["event"] for a in flat["audit"]]
        assert state.audit.offset == flat.get("audit_offset", 0)
        assert state.events.entries == flat["events"]
        assert state.events.offset == flat.get("events_offset", 0)
        assert set(state.dedup.recent_results) == set(flat["recent_results"]) != set()
        assert state.counters.model_dump(exclude_defaults=True) == flat["counters"]


def test_a_state_is_written_back_in_the_flat_shape_it_was_read_from() -> None:
    converter = data_converter().payload_converter
    for flat in carried_states():
        state = ConversationState.model_validate(flat)
        [payload] = converter.to_payloads([state])
        written = json.loads(payload.data)
        # Contracts that gained fields since the recording: each old field is kept.
        assert flat.pop("counters").items() <= written.pop("counters").items()
        assert set(flat.pop("recent_results")) == set(written.pop("recent_results"))
        assert written.pop("reports_sent", 0) == 0  # added since; a payload leaves out a 0
        # Written now, a field at its zero default is left out (``Contract``), and so is a
        # tool message's content that is its artifact's payload as JSON.
        assert without_zeros(written) == without_zeros(without_payload_content(flat))
        [back] = converter.from_payloads([payload], [ConversationState])
        assert back == state


def without_payload_content(flat: dict) -> dict:
    """``flat`` with each tool message's content left out where a payload leaves it out."""
    transcript = []
    for message in flat["transcript"]:
        artifact = message.get("artifact")
        if (
            message["type"] == "tool"
            and isinstance(artifact, dict)
            and "payload" in artifact
            and message["content"] == json.dumps(artifact["payload"], ensure_ascii=False)
        ):
            message = {k: v for k, v in message.items() if k != "content"}
        transcript.append(message)
    return {**flat, "transcript": transcript}


def without_zeros(value: object) -> object:
    """``value`` without the keys whose value is a zero (0, False, ""), at any depth."""
    if isinstance(value, dict):
        return {
            k: without_zeros(v)
            for k, v in value.items()
            if not (isinstance(v, (bool, int, float, str)) and not v)
        }
    if isinstance(value, list):
        return [without_zeros(v) for v in value]
    return value


def test_sub_models_given_as_objects_stay_sub_models() -> None:
    state = ConversationState(session_id="s", user_id="ann")
    state.audit.offset, state.transcript.offset = 3, 2
    copy = ConversationState(**dict(state))
    assert copy == state and copy.transcript.offset == 2


def test_a_start_carrying_a_flat_state_reads_it() -> None:
    """How the state really arrives: inside the next run's ``ConversationStart``."""
    flat = carried_states()[0]
    start = ConversationStart.model_validate(
        {"session_id": flat["session_id"], "user_id": flat["user_id"], "carried_state": flat}
    )
    assert start.carried_state is not None
    assert start.carried_state.transcript.length == (
        flat.get("transcript_offset", 0) + len(flat["transcript"])
    )
