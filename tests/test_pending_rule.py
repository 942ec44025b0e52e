"""A pending call names the policy rule that made it wait (``PendingCall.rule``): in the
state query, in the turn result its history keeps, after an edit that waits again (the
rule the new arguments matched), and in the inbox, whose rule filter reads it (a call
recorded before the field still gives the rule its reason names). Real dev server and
worker; the model is scripted.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from parley.client import Conversations
from parley.client.inbox import Inbox, read_inbox, rule_of
from parley.contracts import Decision, PendingCall, PolicyRule
from tests.support import ByConversation, call, registry, script
from tests.support.transcripts import new_session
from tests.support.waiting import eventually

RULES = [
    PolicyRule(name="q3-records", tool="write_record", args={"title": "Q3"}, decide="confirm"),
    PolicyRule(name="q4-records", tool="write_record", args={"title": "Q4"}, decide="confirm"),
    PolicyRule(
        name="q5-reviewed",
        tool="write_record",
        args={"title": "Q5"},
        decide="confirm",
        requires_reviewer=True,
    ),
]
#: Each conversation's first message, and the call its model proposes.
PROPOSALS = {
    "write Q3": call("write_record", "c1", title="Q3"),
    "write Q4": call("write_record", "c1", title="Q4"),
    "write Q6": call("write_record", "c1", title="Q6"),  # no rule: the tool's policy
    "write Q3, then edit": call("write_record", "c1", title="Q3"),
}


def model() -> ByConversation:
    return ByConversation(
        scripts={
            text: script({"tool_calls": [proposal]}, {"content": "done"})
            for text, proposal in PROPOSALS.items()
        }
    )


async def inbox_of(conv: Conversations, user: str, calls: int, **filters: str) -> Inbox:
    """The user's inbox once visibility shows ``calls`` calls (it trails a moment)."""

    async def read() -> Inbox | None:
        found = await read_inbox(conv, user, **filters)
        return found if len(found.calls) == calls else None

    return await eventually(read, 60, f"{calls} calls in {user}'s inbox")


async def test_a_pending_call_names_its_rule_and_the_inbox_filters_by_it(
    parley_worker,
) -> None:
    tag = uuid.uuid4().hex[:6]
    me, reviewer = f"rina-{tag}", f"rex-{tag}"
    tools = registry()
    tools.rules.extend(RULES)
    sessions = {text: new_session() for text in PROPOSALS}
    async with parley_worker(tools, model()) as conv:
        for text, sid in sessions.items():
            turn = await conv.send(sid, me, text, reviewers=[reviewer])
            assert turn.status == "awaiting_approval", turn
        [edited] = (await conv.state(sessions["write Q3, then edit"], me)).pending
        assert edited.rule == "q3-records"
        edit = [Decision(tool_call_id="c1", action="edit", args={"title": "Q5"})]
        again = await conv.decide(sessions["write Q3, then edit"], me, edit)
        [waits] = again.pending  # the owner's edit into a reviewer rule waits again
        assert waits.rule == "q5-reviewed" and waits.reviewer_rule == "q5-reviewed"
        rules = {}
        for text, sid in sessions.items():
            [pending] = (await conv.state(sid, me)).pending
            rules[text] = pending.rule
        assert rules == {
            "write Q3": "q3-records",
            "write Q4": "q4-records",
            "write Q6": None,
            "write Q3, then edit": "q5-reviewed",
        }
    # The worker is gone: the inbox reads the calls from their histories.
    names = {sid: text for text, sid in sessions.items()}
    everything = await inbox_of(conv, reviewer, 4)
    assert {names[c.session_id]: c.rule for c in everything.calls} == rules
    assert all(c.rule == c.call.rule for c in everything.calls)
    for rule, texts in {
        "q3-records": ["write Q3"],
        "q4-records": ["write Q4"],
        "q5-reviewed": ["write Q3, then edit"],
    }.items():
        found = await read_inbox(conv, reviewer, rule=rule)
        assert [names[c.session_id] for c in found.calls] == texts, rule


def test_the_inbox_reads_a_calls_rule_and_a_call_recorded_before_it_by_its_reason() -> None:
    def waiting(**fields: str) -> PendingCall:
        return PendingCall(
            tool_call_id="c1",
            name="write_record",
            args={},
            description="",
            expires_at=datetime.now(UTC) + timedelta(minutes=5),
            **fields,  # type: ignore[arg-type]
        )

    # The field alone names it: the reason is words for people, not read.
    assert rule_of(waiting(rule="q3-records")) == "q3-records"
    named = waiting(rule="q3-records", reason="confirm because rule `other` matched")
    assert rule_of(named) == "q3-records"
    recorded_before = waiting(reason="confirm because rule `q4-records` matched")
    assert recorded_before.rule is None and rule_of(recorded_before) == "q4-records"
    assert rule_of(waiting(reviewer_rule="q5-reviewed")) == "q5-reviewed"
    assert rule_of(waiting(reason="confirm: the tool's own policy")) is None
