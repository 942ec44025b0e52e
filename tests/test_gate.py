"""The gate's checks (``workflows/rules/gate.py``) as plain functions: no Temporal server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError

from parley.contracts import (
    ConversationState,
    DecideInput,
    Decision,
    PendingCall,
    SendMessageInput,
    ToolCatalogue,
    ToolSpec,
)
from parley.contracts.errors import ErrorType
from parley.workflows.rules import gate

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["title"],
}
CATALOGUE = ToolCatalogue(
    tools=[
        ToolSpec(name="write", description="Write.", policy="confirm", args_schema=SCHEMA),
        ToolSpec(
            name="loose",
            description="Takes extras.",
            policy="confirm",
            args_schema={**SCHEMA, "additionalProperties": True},
            extra_args_allowed=True,
        ),
    ]
)


def pending(call_id: str, name: str = "write", *, expires_in: float = 3600) -> PendingCall:
    return PendingCall(
        tool_call_id=call_id,
        name=name,
        args={"title": "Q3"},
        description="Write.",
        expires_at=NOW + timedelta(seconds=expires_in),
    )


def state(*calls: PendingCall, **fields: object) -> ConversationState:
    return ConversationState(
        session_id="s", user_id="ann", pending=list(calls), tools=CATALOGUE, **fields
    )


def refused(check, *args) -> ApplicationError:  # type: ignore[no-untyped-def]
    with pytest.raises(ApplicationError) as caught:
        check(*args)
    assert caught.value.non_retryable
    return caught.value


def decide(*decisions: Decision, by: str = "ann") -> DecideInput:
    return DecideInput(decisions=list(decisions), decided_by=by)


def message(text: str, user: str = "ann") -> SendMessageInput:
    return SendMessageInput(text=text, message_id="m1", user_id=user)


# --- messages ---------------------------------------------------------------------


def test_a_message_is_accepted_when_nothing_is_owed() -> None:
    gate.check_message(state(), message("hello"), max_bytes=100)


@pytest.mark.parametrize(
    ("conversation", "text", "user", "error_type"),
    [
        (state(), "hello", "bob", ErrorType.NOT_OWNER),
        (state(ended=True), "hello", "ann", ErrorType.CONVERSATION_ENDED),
        (state(turn_running=True), "hello", "ann", ErrorType.TURN_IN_PROGRESS),
        (state(), "   ", "ann", ErrorType.INVALID_MESSAGE),
        (state(), "x" * 101, "ann", ErrorType.MESSAGE_TOO_LARGE),
        (state(pending("c1")), "yes, I confirm", "ann", ErrorType.DECISIONS_OWED),
    ],
)
def test_a_message_is_refused(conversation, text, user, error_type) -> None:  # type: ignore[no-untyped-def]
    error = refused(gate.check_message, conversation, message(text, user), 100)
    assert error.type == error_type


def test_a_too_large_message_says_its_size_and_the_limit() -> None:
    error = refused(gate.check_message, state(), message("é" * 60), 100)
    assert "120 bytes" in error.message and "at most 100 bytes" in error.message


def test_decisions_owed_name_the_pending_calls() -> None:
    error = refused(gate.check_message, state(pending("c1"), pending("c2")), message("hi"), 100)
    assert "c1 (write)" in error.message and "c2 (write)" in error.message


# --- decisions --------------------------------------------------------------------


def test_one_decision_for_every_pending_call_is_accepted() -> None:
    conversation = state(pending("c1"), pending("c2"))
    gate.check_decisions(
        conversation,
        decide(
            Decision(tool_call_id="c1", action="approve"),
            Decision(tool_call_id="c2", action="edit", args={"title": "Q4", "count": 2}),
        ),
        NOW,
    )


def test_a_decision_may_name_some_of_the_pending_calls() -> None:
    """The calls it does not name keep waiting (a link, a card, ``approve CALL``)."""
    conversation = state(pending("c1"), pending("c2"))
    gate.check_decisions(conversation, decide(Decision(tool_call_id="c1", action="approve")), NOW)


@pytest.mark.parametrize(
    ("decisions", "says"),
    [
        ([], "no tool call is named"),
        (
            [
                Decision(tool_call_id="c1", action="approve"),
                Decision(tool_call_id="c1", action="reject"),
                Decision(tool_call_id="c2", action="approve"),
            ],
            "decided more than once",
        ),
        (
            [
                Decision(tool_call_id="c1", action="approve"),
                Decision(tool_call_id="c2", action="approve"),
                Decision(tool_call_id="c9", action="approve"),
            ],
            "unknown or no longer pending: c9",
        ),
        (
            [
                Decision(tool_call_id="c1", action="edit", args={"title": "Q3", "force": True}),
                Decision(tool_call_id="c2", action="approve"),
            ],
            "'force' was unexpected",
        ),
        (
            [
                Decision(tool_call_id="c1", action="edit", args={"title": 42}),
                Decision(tool_call_id="c2", action="approve"),
            ],
            "title: 42 is not of type 'string'",
        ),
    ],
)
def test_a_decision_set_that_cannot_be_carried_out_is_refused(decisions, says) -> None:  # type: ignore[no-untyped-def]
    error = refused(
        gate.check_decisions, state(pending("c1"), pending("c2")), decide(*decisions), NOW
    )
    assert error.type == ErrorType.INVALID_DECISION
    assert says in error.message


def test_a_tool_that_opts_in_takes_extra_keys() -> None:
    edit = Decision(tool_call_id="c1", action="edit", args={"title": "Q3", "force": True})
    gate.check_decisions(state(pending("c1", "loose")), decide(edit), NOW)


def test_a_call_past_its_deadline_never_runs_even_before_its_timer() -> None:
    conversation = state(pending("c1", expires_in=-1), pending("c2"))
    error = refused(
        gate.check_decisions,
        conversation,
        decide(
            Decision(tool_call_id="c1", action="approve"),
            Decision(tool_call_id="c2", action="approve"),
        ),
        NOW,
    )
    assert "expired, will not run: c1" in error.message
    only_expired = state(pending("c1", expires_in=-1))
    error = refused(
        gate.check_decisions,
        only_expired,
        decide(Decision(tool_call_id="c1", action="approve")),
        NOW,
    )
    assert error.type == ErrorType.NO_DECISIONS_OWED and "c1 expired" in error.message


def test_only_the_owner_decides_and_nothing_pending_is_refused() -> None:
    approve = Decision(tool_call_id="c1", action="approve")
    assert refused(
        gate.check_decisions, state(pending("c1")), decide(approve, by="bob"), NOW
    ).type == (ErrorType.NOT_OWNER)
    assert refused(gate.check_decisions, state(), decide(approve), NOW).type == (
        ErrorType.NO_DECISIONS_OWED
    )


def test_args_error_names_an_unknown_tool() -> None:
    assert gate.args_error(CATALOGUE, "drop", {}) == "unknown tool 'drop'"
    assert gate.args_error(CATALOGUE, "write", {"title": "ok"}) is None


def test_what_a_request_carries_beside_its_message_is_bounded_like_one() -> None:
    """A respond message, edited arguments or a front end's tool definitions enter
    history as they are: together they fit in the message limit, or are refused."""
    from parley.contracts import ClientTool
    from parley.contracts.errors import InvalidDecision, InvalidMessage, MessageTooLarge

    conversation = state(pending("c1"), pending("c2"))
    fits = decide(Decision(tool_call_id="c1", action="respond", message="x" * 90))
    gate.check_client_run(conversation, fits, 100, InvalidDecision)
    for big in (
        decide(Decision(tool_call_id="c1", action="respond", message="x" * 101)),
        decide(Decision(tool_call_id="c1", action="edit", args={"title": "x" * 101})),
    ):
        with pytest.raises(MessageTooLarge, match="at most 100 bytes"):
            gate.check_client_run(conversation, big, 100, InvalidDecision)
    tools = [ClientTool(name="show_chart", description="d" * 101)]
    with pytest.raises(MessageTooLarge, match="front-end tools"):
        gate.check_client_run(
            conversation, message("hi").model_copy(update={"client_tools": tools}), 100,
            InvalidMessage,
        )  # fmt: skip
