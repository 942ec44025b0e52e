"""Reverts on the command line and the gateway. ``parley revert`` of a created plan
prints the turn as ``approve`` does: the inverse (``revert-c1 delete_plan``) waits for
its approval, with its preview, and approving it removes the row; a revert of a call
whose tool declares no inverse is one line, exit 1. ``POST
/v1/conversations/{id}/calls/{call_id}/revert``: the owner gets the turn (awaiting
approval of the inverse), a stranger is refused as for a conversation not theirs, a call
with no inverse is 422; the route is in the OpenAPI document. Real dev server, worker,
gateway and plans service; the model is a script."""

from __future__ import annotations

import httpx
from temporalio.client import Client

from parley.contracts import Decision
from tests.support import call, script
from tests.support.cli import assert_one_line_error, parley_against
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, auth, serve_gateway
from tests.support.plans import plans_registry, rows
from tests.support.transcripts import new_session

TITLE = "Q4 roadmap"
#: The scripted model answers by the count of assistant messages, and a revert's
#: proposal is one (Parley's own): this entry stands for it and is never asked for.
PARLEY_PROPOSES = {"content": "(Parley proposes the inverse)"}


def planning_model():
    return script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Created."},
        PARLEY_PROPOSES,
        {"content": "Deleted it again."},
    )


def approve(call_id: str) -> list[Decision]:
    return [Decision(tool_call_id=call_id, action="approve")]


async def test_parley_revert_proposes_the_inverse_and_its_approval_removes_the_row(
    parley_worker, client: Client, plans
) -> None:
    user = "maria"
    async with parley_worker(plans_registry(plans), planning_model()) as conversations:
        sid = new_session()
        await conversations.send(sid, user, "plan Q4")
        await conversations.decide(sid, user, approve("c1"))
        assert [r["title"] for r in rows(plans, user)] == [TITLE]

        reverted = await parley_against(
            conversations, client, "revert", "--session", sid, "--user", user, "--call", "c1"
        )
        assert reverted.returncode == 0, reverted.stderr
        assert "Waiting for your decision:\n  delete_plan (revert-c1)" in reverted.stdout
        assert "deletes: yes" in reverted.stdout  # its preview
        assert f"parley approve|edit|reject|respond --session {sid} --user {user}" in (
            reverted.stdout
        )
        assert [r["title"] for r in rows(plans, user)] == [TITLE]  # gated: nothing yet

        approved = await parley_against(
            conversations, client, "approve", "--session", sid, "--user", user, "revert-c1"
        )
        assert approved.returncode == 0, approved.stderr
        assert "Deleted it again." in approved.stdout
        assert rows(plans, user) == []

        again = await parley_against(
            conversations, client, "revert", "-s", sid, "-u", user, "-c", "c1"
        )
        assert_one_line_error(again, "c1 was already reverted")
        # The inverse itself (delete_plan) declares none.
        none = await parley_against(
            conversations, client, "revert", "-s", sid, "-u", user, "-c", "revert-c1"
        )
        assert_one_line_error(none, "revert-c1 cannot be reverted: delete_plan declares no inverse")


async def test_the_gateway_reverts_for_the_owner_and_refuses_others(parley_worker, plans) -> None:
    async with (
        parley_worker(plans_registry(plans), planning_model()) as conversations,
        serve_gateway(conversations) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = new_session()
        await conversations.send(sid, "alice", "plan Q4")
        await conversations.decide(sid, "alice", approve("c1"))
        path = f"/v1/conversations/{sid}/calls/c1/revert"

        stranger = await http.post(path, headers=auth(BOB_TOKEN))
        assert stranger.status_code == 404, stranger.text
        assert stranger.json()["error"]["type"] == "NotFound"

        turn = await http.post(path, headers=auth(ALICE_TOKEN))
        assert turn.status_code == 200, turn.text
        assert turn.json()["status"] == "awaiting_approval"
        [inverse] = turn.json()["pending"]
        assert (inverse["tool_call_id"], inverse["name"]) == ("revert-c1", "delete_plan")
        assert [r["title"] for r in rows(plans, "alice")] == [TITLE]

        await conversations.decide(sid, "alice", approve("revert-c1"))
        assert rows(plans, "alice") == []
        none = await http.post(
            f"/v1/conversations/{sid}/calls/revert-c1/revert", headers=auth(ALICE_TOKEN)
        )
        assert none.status_code == 422, none.text
        assert "delete_plan declares no inverse" in none.json()["error"]["message"]

        spec = (await http.get("/openapi.json")).json()
        operation = spec["paths"]["/v1/conversations/{session_id}/calls/{call_id}/revert"]["post"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/TurnResult"
        }
