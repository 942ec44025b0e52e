"""Where a transcript may be cut (``parley.contracts.cuts``), the rule fork and rewind
share, without a server: a cut that would leave a tool call without its answer is
refused, naming the nearest cuts that leave none; a cut outside the conversation is
refused, saying how many messages there are."""

from __future__ import annotations

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from parley.contracts.cuts import cut_refusal, unanswered

CALL = {"name": "write_record", "args": {"title": "x"}, "id": "c1"}
#: Message 1 asks, 2 calls, 3 answers the call, 4 replies, 5 asks again.
MESSAGES: list[AnyMessage] = [
    HumanMessage(content="write x"),
    AIMessage(content="", tool_calls=[CALL]),
    ToolMessage(content="ok", tool_call_id="c1"),
    AIMessage(content="written"),
    HumanMessage(content="next"),
]


def test_a_cut_names_the_nearest_cuts_that_leave_no_call_unanswered() -> None:
    assert cut_refusal(MESSAGES, 0, 2, 5) == (
        "cannot keep the first 2 messages: the model's tool call c1 would be left without "
        "its answer; the nearest cuts that leave none: 1 (after a user message) or 3 (after "
        "the answers to the model's calls)"
    )
    assert cut_refusal(MESSAGES, 0, 4, 5) is None and cut_refusal(MESSAGES, 0, 5, 5) is None
    # The validator sees only the messages its run keeps: an answer kept out whose call
    # is older than those is caught too.
    assert cut_refusal(MESSAGES[2:], 2, 2, 5) is not None


def test_a_cut_outside_the_conversation_says_how_many_messages_it_has() -> None:
    assert cut_refusal([], 0, 1, 0) == "the conversation has no messages yet: nothing to cut"
    for at in (0, 6):
        assert cut_refusal(MESSAGES, 0, at, 5) == (
            f"the conversation has 5 messages: keep 1 to 5 of them, not {at}"
        )


def test_the_nearest_cuts_are_described_by_what_they_keep() -> None:
    two_calls = [
        HumanMessage(content="write x and y"),
        AIMessage(content="", tool_calls=[CALL, {**CALL, "id": "c2"}]),
        ToolMessage(content="ok", tool_call_id="c1"),
        ToolMessage(content="ok", tool_call_id="c2"),
        AIMessage(content="written both"),
    ]
    assert unanswered(two_calls, 0, 3) == ["c2"]
    assert cut_refusal(two_calls, 0, 3, 5) == (
        "cannot keep the first 3 messages: the model's tool call c2 would be left without "
        "its answer; the nearest cuts that leave none: 1 (after a user message) or 4 (after "
        "the answers to the model's calls)"
    )
    # Keeping all of them is described as such.
    assert cut_refusal(MESSAGES[:3], 0, 2, 3) == (
        "cannot keep the first 2 messages: the model's tool call c1 would be left without "
        "its answer; the nearest cuts that leave none: 1 (after a user message) or 3 (all "
        "of them)"
    )
