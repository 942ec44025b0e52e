"""Signed one-time approval links, against a real dev server, worker, webhook and
gateway: the webhook gets approve and reject links for each call and each person who may
decide it; opening a link shows what it will do and decides nothing; using it decides
that call once, as the link's user, audited with channel ``link``. A reused link, an
expired one, one for arguments that changed and a forged one are each refused with a
page that says why, and nothing runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from parley.contracts import Decision, PolicyRule
from parley.contracts.links import ApprovalLink, LinkRefused, verify
from parley.tools import ToolRegistry, confirm
from tests.support import call, script
from tests.support.gateway import serve_gateway
from tests.support.policy_tools import push_branch
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually
from tests.support.webhook import Webhook

SECRET = "test-link-secret-0123456789abcdefghijklmnop"
PAGE = "http://approvals.example"
TWO_OF_THEM = PolicyRule(
    name="two-for-main", tool="push_branch", args={"branch": "main"}, decide="confirm",
    approvals=2,
)  # fmt: skip


def local(url: str, base: str) -> str:
    """A link as the webhook got it, pointed at the test's gateway."""
    return base + url.removeprefix(PAGE)


async def test_a_link_approves_once_and_every_other_use_is_refused(parley_worker) -> None:
    model = script(
        {
            "content": "",
            "tool_calls": [
                call("push_branch", "l1", branch="feat/a"),
                call("push_branch", "l2", branch="feat/b"),
            ],
        },
        {"content": "Done."},
    )  # fmt: skip
    with Webhook(200) as webhook:
        async with (
            parley_worker(
                ToolRegistry([confirm(push_branch)]),
                model,
                notify_url=webhook.url,
                gateway_public_url=PAGE,
                link_secret=SECRET,
            ) as conversations,
            serve_gateway(conversations) as base,
            httpx.AsyncClient(timeout=60) as http,
        ):
            sid = new_session()
            await conversations.send(sid, "alice", "push both", reviewers=["bob"])
            await eventually(lambda: webhook.requests, what="the webhook is told")
            (_, body), *_ = webhook.requests
            links = {(e["tool_call_id"], e["user_id"]): e for e in body["links"]}
            assert set(links) == {("l1", "alice"), ("l1", "bob"), ("l2", "alice"), ("l2", "bob")}
            approve_l1 = local(links[("l1", "bob")]["approve"], base)

            # Opening it decides nothing: it shows the call and a button.
            shown = await http.get(approve_l1)
            assert shown.status_code == 200 and "feat/a" in shown.text and "<form" in shown.text
            assert runs_in(sid, "push_branch") == []

            used = await http.post(approve_l1)
            assert used.status_code == 200, used.text
            assert "You approved push_branch; it ran: success." in used.text
            assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["feat/a"]
            # Only that call: l2 still waits for its own decision.
            state = await conversations.state(sid, "alice")
            assert [p.tool_call_id for p in state.pending] == ["l2"]
            (decided,) = [e for e in state.audit if e.event == "decided"]
            assert decided.actor == "bob" and decided.tool_call_id == "l1"
            assert decided.detail["link"] and decided.channel == "link"

            # Used once: again (or the reject link of the same call) is refused.
            again = await http.post(approve_l1)
            assert again.status_code == 409 and "already used, by bob" in again.text
            reject_l1 = await http.post(local(links[("l1", "alice")]["reject"], base))
            assert reject_l1.status_code == 409 and "no longer waits" in reject_l1.text

            # A forged or cut link, and an expired one, signed right: refused, 403 / 410.
            forged = await http.post(approve_l1[:-3] + "abc")
            assert forged.status_code == 403 and "not one Parley made" in forged.text
            old = ApprovalLink(
                session_id=sid, tool_call_id="l2", args_hash=state.pending[0].args_hash,
                user_id="alice", action="approve",
                expires=int((datetime.now(UTC) - timedelta(minutes=1)).timestamp()),
            )  # fmt: skip
            expired = await http.post(f"{base}/links/{old.sign(SECRET)}")
            assert expired.status_code == 410 and "expired" in expired.text

            # A link for arguments other than the call's now: refused, and nothing ran.
            changed = old.model_copy(update={"args_hash": "0" * 16, "expires": old.expires + 7200})
            answer = await http.post(f"{base}/links/{changed.sign(SECRET)}")
            assert answer.status_code == 409 and "arguments of push_branch changed" in answer.text
            assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["feat/a"]

            # The reject link of l2 rejects it, with the reason typed on the page.
            rejected = await http.post(
                local(links[("l2", "alice")]["reject"], base), data={"message": "not b"}
            )
            assert rejected.status_code == 200 and "You rejected push_branch" in rejected.text
            final = await conversations.state(sid, "alice")
            assert final.pending == [] and final.last_turn and final.last_turn.reply == "Done."
            refusal = [e for e in final.audit if e.event == "decided" and e.tool_call_id == "l2"]
            assert refusal[0].detail["message"] == "not b" and refusal[0].channel == "link"
            assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["feat/a"]


async def test_a_link_counts_as_one_approval_of_a_quorum(parley_worker) -> None:
    model = script(
        {"content": "", "tool_calls": [call("push_branch", "m1", branch="main")]},
        {"content": "Pushed."},
    )
    with Webhook(200) as webhook:
        async with (
            parley_worker(
                ToolRegistry([confirm(push_branch)], rules=[TWO_OF_THEM]),
                model,
                notify_url=webhook.url,
                gateway_public_url=PAGE,
                link_secret=SECRET,
            ) as conversations,
            serve_gateway(conversations) as base,
            httpx.AsyncClient(timeout=60) as http,
        ):
            sid = new_session()
            turn = await conversations.send(sid, "alice", "push main", reviewers=["bob", "carol"])
            await eventually(lambda: webhook.requests, what="the webhook is told")
            body = webhook.requests[0][1]
            links = {e["user_id"]: e for e in body["links"]}
            # An approve link goes only to those whose approve is taken: the requester
            # of a reviewer rule's call gets a reject link only.
            assert body["awaiting"] == {"m1": ["bob", "carol"]}
            assert "approve" not in links["alice"] and "reject" in links["alice"]
            shown = await http.get(local(links["bob"]["approve"], base))
            # The link page wears the approval page's look and leads back to it.
            assert '<link rel="stylesheet" href="/static/base.css">' in shown.text
            assert f'href="/#c={sid}"' in shown.text
            assert (await http.get(f"{base}/static/base.css")).status_code == 200
            first = await http.post(local(links["bob"]["approve"], base))
            assert "1 of 2 approvals" in first.text and runs_in(sid, "push_branch") == []
            assert f'href="/#c={sid}"' in first.text
            (pending,) = turn.pending
            approve = Decision(tool_call_id="m1", action="approve", args_hash=pending.args_hash)
            await conversations.decide(sid, "carol", [approve])
            assert [r["branch"] for r in runs_in(sid, "push_branch")] == ["main"]


def test_a_link_holds_only_with_its_signature() -> None:
    link = ApprovalLink(
        session_id="s", tool_call_id="c", args_hash="h", user_id="u", action="approve",
        expires=int((datetime.now(UTC) + timedelta(hours=1)).timestamp()),
    )  # fmt: skip
    token = link.sign(SECRET)
    assert verify(token, SECRET, datetime.now(UTC)) == link
    for bad in (token + "x", "x" + token, token.replace(".", ""), "", "."):
        with pytest.raises(LinkRefused):
            verify(bad, SECRET, datetime.now(UTC))
    with pytest.raises(LinkRefused):
        verify(token, SECRET + "-other", datetime.now(UTC))
