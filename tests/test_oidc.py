"""End to end: users from an OpenID Connect provider, against a local issuer on
127.0.0.1 (``tests.support.oidc_issuer``: discovery, a JWKS, /authorize, /token with
PKCE) and the real gateway: a valid token is its user; expired, not yet valid, another
audience, another issuer, ``alg: none``, HS256 keyed with the public key, another key,
altered claims, a symmetric key in the JWKS: each a 401 saying why, never echoing the
token; keys rotate (a key added later is fetched, one withdrawn stops working) and
made-up key ids cannot make the gateway fetch on every request; an issuer down answers
503 only for a token whose key must be fetched. Groups: the conversation's reviewer
being ``group:ops``, a member of ``ops`` reads it, is offered Approve, lists it, follows
its events and decides a call whose rule needs a reviewer (REST's and AG-UI's paths); a
member of another group gets 404 on each; no approval link is made for the group. The
tokens file works beside it. ``parley gateway`` says a bad setting or a failed discovery
in one line. And the page signs in with the provider in Chromium (PKCE) and lists the
user's conversations."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from playwright.async_api import Page, expect
from temporalio.testing import WorkflowEnvironment

from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import PolicyRule
from parley.gateway.access import TokenTable
from parley.gateway.oidc import OidcVerifier
from parley.gateway.oidc_settings import OidcSettings
from parley.gateway.server import serving
from parley.tools import ToolRegistry
from tests.support import RUNS, call, runs_of, script
from tests.support.gateway import ALICE_TOKEN, TOKENS, EventReader, auth
from tests.support.oidc_issuer import AUDIENCE, CLIENT_ID, LocalIssuer, local_issuer, new_key
from tests.support.ports import free_port
from tests.support.recording_tools import confirm, write_record
from tests.support.waiting import eventually
from tests.support.webhook import Webhook

#: Key fetches for an unknown key id: at most one per this long (kept short for tests).
REFRESH_SECONDS = 1.0
PARLEY = [str(Path(sys.executable).parent / "parley")]
#: Approval links (the webhook's): signed with this, pointing at this page.
SECRET = "test-link-secret-0123456789abcdefghijklmnop"
PAGE = "http://approvals.example"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict, claims: dict, signature: bytes = b"") -> str:
    """A token put together by hand, as an attacker would."""
    head = b64(json.dumps(header).encode())
    body = b64(json.dumps(claims).encode())
    return f"{head}.{body}.{b64(signature)}"


@contextlib.asynccontextmanager
async def oidc_gateway(conversations: Conversations, issuer: LocalIssuer) -> AsyncIterator[str]:
    settings = OidcSettings(
        issuer=issuer.url,
        audience=AUDIENCE,
        client_id=CLIENT_ID,
        jwks_refresh_seconds=REFRESH_SECONDS,
    )
    verifier = OidcVerifier(settings)
    await verifier.start()
    async with serving(conversations, TokenTable(TOKENS), "127.0.0.1", 0, oidc=verifier) as url:
        yield url


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    with local_issuer() as started:
        # A shared secret in the JWKS: a verifier must never load it as a key.
        started.extra_jwks.append(
            {"kty": "oct", "kid": "shared", "alg": "HS256", "k": b64(b"s" * 32)}
        )
        yield started


@pytest.fixture(scope="module")
async def base(temporal_env: WorkflowEnvironment, issuer: LocalIssuer) -> AsyncIterator[str]:
    """One gateway with the issuer for the module's token tests (no worker: /v1/me and
    the listing need none)."""
    config = Settings(task_queue=f"parley-oidc-{uuid.uuid4().hex[:8]}")
    async with oidc_gateway(Conversations(temporal_env.client, config), issuer) as url:
        yield url


async def me(base: str, token: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        return await http.get("/v1/me", headers=auth(token))


async def refused(base: str, token: str, says: str) -> None:
    answer = await me(base, token)
    assert answer.status_code == 401, (says, answer.text)
    assert answer.headers["www-authenticate"] == "Bearer"
    error = answer.json()["error"]
    assert error["type"] == "Unauthenticated"
    assert re.search(says, error["message"]), (says, error["message"])
    for part in token.split("."):  # the token is never echoed, nor a part of it
        assert len(part) < 8 or part not in error["message"]


async def test_a_valid_token_is_its_user_and_the_tokens_file_works_beside_it(
    base: str, issuer: LocalIssuer
) -> None:
    answer = await me(base, issuer.token("carol"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["user_id"] == "carol"
    answer = await me(base, issuer.token("dave", kid="k1"))
    assert answer.json()["user_id"] == "dave"
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        listed = await http.get("/v1/conversations", headers=auth(issuer.token("carol")))
        assert listed.status_code == 200, listed.text
        assert (await http.get("/v1/me", headers=auth(ALICE_TOKEN))).json()["user_id"] == "alice"
        # The page's sign-in settings: public, no token needed.
        config = (await http.get("/auth/config")).json()["oidc"]
    assert config == {
        "issuer": issuer.url,
        "client_id": CLIENT_ID,
        "scopes": "openid profile",
        "authorization_endpoint": f"{issuer.url}/authorize",
        "token_endpoint": f"{issuer.url}/token",
        "bearer": "access_token",
    }


async def test_each_bad_token_is_a_401_that_says_why(base: str, issuer: LocalIssuer) -> None:
    now = int(time.time())
    good = issuer.token("carol")
    head, _, signature = good.split(".")
    public_pem = (
        issuer.keys["k1"]
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    claims = issuer.claims("carol")
    hs256 = hand_made({"alg": "HS256", "kid": "k1", "typ": "JWT"}, claims)
    hs_head, hs_body, _ = hs256.split(".")
    hs256 = f"{hs_head}.{hs_body}." + b64(
        hmac.new(public_pem, f"{hs_head}.{hs_body}".encode(), hashlib.sha256).digest()
    )
    impostor = new_key("k1")  # the issuer's key id, another key
    issuer.keys["impostor"] = impostor
    forged = issuer.token("carol", kid="impostor", headers={"kid": "k1"})
    stranger = issuer.token("carol", kid="impostor", headers={"kid": "nobody-publishes-this"})
    altered = f"{head}.{b64(json.dumps({**claims, 'sub': 'alice'}).encode())}.{signature}"
    symmetric = hand_made({"alg": "HS256", "kid": "shared"}, claims)
    symmetric_rs = issuer.token("carol", headers={"kid": "shared"})

    for token, says in [
        (issuer.token("carol", exp=now - 120), "expired"),
        (issuer.token("carol", nbf=now + 600), "not valid yet"),
        (issuer.token("carol", aud="another-service"), f"audience is not '{AUDIENCE}'"),
        (issuer.token("carol", iss="http://127.0.0.1:1/evil"), "not issued by"),
        (issuer.token("carol", exp=None), "no 'exp' claim"),
        (issuer.token(None, sub=None), "no 'sub' claim"),
        (issuer.token("group:ops"), "names a group"),
        (hand_made({"alg": "none", "kid": "k1"}, claims), "algorithm 'none' is not accepted"),
        (hand_made({"alg": "None"}, claims), "algorithm 'None' is not accepted"),
        (hs256, "algorithm 'HS256' is not accepted"),
        (symmetric, "algorithm 'HS256' is not accepted"),
        (symmetric_rs, "a key the issuer does not publish"),
        (forged, "signature does not verify"),
        (altered, "signature does not verify"),
        (stranger, "a key the issuer does not publish"),
        (f"{head}.!!!.{signature}", "not a well-formed JWT"),
        ("not-a-jwt-but-long-enough", "not known to the gateway"),
    ]:
        await refused(base, token, says)
    assert (await me(base, good)).status_code == 200  # the good one still is


async def test_keys_rotate_and_made_up_key_ids_do_not_make_it_fetch(
    base: str, issuer: LocalIssuer
) -> None:
    await asyncio.sleep(REFRESH_SECONDS)  # the last test's unknown key fetched once
    issuer.add_key("k2")  # published after the gateway started
    fetches = issuer.jwks_fetches
    assert (await me(base, issuer.token("carol", kid="k2"))).status_code == 200
    assert issuer.jwks_fetches == fetches + 1

    # A flood of made-up key ids: at most one fetch per REFRESH_SECONDS, however many.
    fetches, began = issuer.jwks_fetches, time.monotonic()
    made_up = [issuer.token("carol", headers={"kid": f"made-up-{i}"}) for i in range(25)]
    answers = await asyncio.gather(*(me(base, token) for token in made_up))
    assert {a.status_code for a in answers} == {401}
    allowed = 1 + int((time.monotonic() - began) / REFRESH_SECONDS)  # 1 on a quiet machine
    assert issuer.jwks_fetches - fetches <= min(allowed, 3)

    # k1 withdrawn, k3 added: the fetch k3 makes drops k1.
    await asyncio.sleep(REFRESH_SECONDS)
    issuer.withdraw("k1")
    issuer.add_key("k3", "ES256")
    issuer.sign_with("k3")
    assert (await me(base, issuer.token("carol"))).status_code == 200
    await refused(base, issuer.token("carol", kid="k1"), "a key the issuer does not publish")
    assert (await me(base, issuer.token("carol", kid="k2"))).status_code == 200


async def test_an_issuer_down_is_503_only_for_a_key_to_fetch(
    base: str, issuer: LocalIssuer
) -> None:
    await asyncio.sleep(REFRESH_SECONDS)
    issuer.jwks_down = True
    issuer.add_key("k4")
    try:
        # Keys already held keep working.
        assert (await me(base, issuer.token("carol"))).status_code == 200
        answer = await me(base, issuer.token("carol", kid="k4"))
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["type"] == "Unreachable"
        assert "sign-in provider cannot be reached" in error["message"]
        assert "503" in error["message"]
    finally:
        issuer.jwks_down = False
    await asyncio.sleep(REFRESH_SECONDS)
    assert (await me(base, issuer.token("carol", kid="k4"))).status_code == 200


OPS_RULE = PolicyRule(
    name="ops-review", tool="write_record", decide="confirm", requires_reviewer=True
)


async def test_a_member_of_a_reviewer_group_is_a_reviewer_everywhere(
    parley_worker, issuer: LocalIssuer
) -> None:
    """``group:ops`` reviews: carol (of ``ops``, never named) reads the conversation,
    is offered Approve, lists it as hers to review, follows its events, reconnects and
    approves through AG-UI; erin (of ``dev``) is a stranger to it everywhere (404). The
    webhook names ``group:ops`` among the approvers but makes no link for it."""
    RUNS.clear()
    tools = ToolRegistry([confirm(write_record)], rules=[OPS_RULE])
    model = script(
        {"content": "Writing.", "tool_calls": [call("write_record", "g1", title="ops")]},
        {"content": "Written."},
    )
    sid = f"oidc-{uuid.uuid4().hex[:10]}"
    path = f"/v1/conversations/{sid}"
    approve = {"decisions": [{"tool_call_id": "g1", "action": "approve"}]}
    resume = {
        "threadId": sid,
        "runId": "run-ops",
        "messages": [],
        "resume": [{"interruptId": "g1", "status": "resolved", "payload": True}],
    }
    carol = auth(issuer.token("carol", groups=["ops"]))
    erin = auth(issuer.token("erin", groups=["dev"]))
    streamed = {"Accept": "text/event-stream"}
    with Webhook(200) as webhook:
        async with (
            parley_worker(
                tools, model, notify_url=webhook.url, gateway_public_url=PAGE, link_secret=SECRET
            ) as conversations,
            oidc_gateway(conversations, issuer) as base,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            turn = await http.post(
                f"{path}/messages",
                json={"text": "write it", "reviewers": ["group:ops"]},
                headers=auth(ALICE_TOKEN),
            )
            assert turn.status_code == 200, turn.text
            assert [p["tool_call_id"] for p in turn.json()["pending"]] == ["g1"]

            # The webhook names the group among the approvers, and links no one as it:
            # the owner gets a reject link only (the rule needs another reviewer).
            await eventually(lambda: webhook.requests, what="the webhook is told")
            body = webhook.requests[0][1]
            assert body["awaiting"] == {"g1": ["group:ops"]}
            assert [(e["user_id"], "approve" in e, "reject" in e) for e in body["links"]] == [
                ("alice", False, True)
            ]

            # Carol reads it as a reviewer, and is offered Approve; the owner is not.
            seen = await http.get(path, headers=carol)
            assert seen.status_code == 200, seen.text
            (view,) = seen.json()["awaiting"]
            assert view["approvers"] == ["group:ops"]
            assert view["may_approve"] and view["may_decide"], view
            (owners,) = (await http.get(path, headers=auth(ALICE_TOKEN))).json()["awaiting"]
            assert not owners["may_approve"] and owners["may_decide"]

            # Erin is a stranger to it: reading, following, deciding, AG-UI.
            for answer in [
                await http.get(path, headers=erin),
                await http.get(f"{path}/events", headers=erin),
                await http.post(f"{path}/decisions", json=approve, headers=erin),
                await http.post(f"{path}/decisions", json=approve, headers={**erin, **streamed}),
                await http.post("/agui", json=resume, headers=erin),
                await http.post("/agui", json={**resume, "resume": []}, headers=erin),
            ]:
                assert answer.status_code == 404, (answer.request.url, answer.text)
            # The owner may not approve it.
            answer = await http.post(f"{path}/decisions", json=approve, headers=auth(ALICE_TOKEN))
            assert answer.status_code == 422 and "ops-review" in answer.text, answer.text
            assert runs_of("write_record") == []

            # Listed as Carol's to review (her group is named), never as Erin's.
            async def reviewing(who: dict[str, str]) -> list[str]:
                listed = await http.get("/v1/conversations?reviewing=true", headers=who)
                assert listed.status_code == 200, listed.text
                return [c["session_id"] for c in listed.json()["conversations"]]

            await eventually(
                lambda: _has(reviewing(carol), sid), what="carol's reviewing list names it"
            )
            assert sid not in await reviewing(erin)

            # Carol follows its events, reconnects through AG-UI (the open interrupt),
            # and approves there; her stream gets the run that follows.
            async with http.stream("GET", f"{path}/events", headers=carol) as follow:
                assert follow.status_code == 200
                events = EventReader(follow)
                await events.until(lambda seen: seen[-1].type == "RUN_FINISHED")
                reconnected = await http.post("/agui", json={**resume, "resume": []}, headers=carol)
                assert reconnected.status_code == 200, reconnected.text
                finished = sse_data(reconnected.text)[-1]
                assert [i["id"] for i in finished["outcome"]["interrupts"]] == ["g1"]
                decided = await http.post("/agui", json=resume, headers=carol)
                assert decided.status_code == 200, decided.text
                assert [e["type"] for e in sse_data(decided.text)][-1] == "RUN_FINISHED"
                # Within the keepalive (15 s): the shared wait woke it, as Carol.
                later = await events.until(lambda seen: seen[-1].type == "RUN_FINISHED", 12)
                assert any(e.type == "TOOL_CALL_RESULT" for e in later)
            assert [r["title"] for r in runs_of("write_record")] == ["ops"]
            state = (await http.get(path, headers=auth(ALICE_TOKEN))).json()
            decided_entries = [e for e in state["audit"] if e["event"] == "decided"]
            assert [(e["actor"], e["tool_call_id"]) for e in decided_entries] == [("carol", "g1")]


async def _has(names: Awaitable[list[str]], name: str) -> bool:
    return name in await names


def sse_data(text: str) -> list[dict]:
    """The events of a whole Server-Sent Events body."""
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def gateway_start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PARLEY_", "TEMPORAL_"))
    }
    environment.update(PARLEY_GATEWAY_PORT=str(free_port()), **env)
    return subprocess.run(
        [*PARLEY, "gateway"], env=environment, capture_output=True, text=True, timeout=60
    )


SECURE = {"PARLEY_OIDC_ISSUER": "https://idp.example", "PARLEY_OIDC_AUDIENCE": "x"}


async def test_a_bad_setting_or_a_failed_discovery_is_one_line_at_start() -> None:
    for env, says in [
        ({"PARLEY_OIDC_ISSUER": "ftp://idp.example"}, "PARLEY_OIDC_ISSUER: .* is not an https URL"),
        ({"PARLEY_OIDC_ISSUER": "http://idp.example"}, "PARLEY_OIDC_ISSUER: use https"),
        ({"PARLEY_OIDC_ISSUER": "https://idp.example"}, "PARLEY_OIDC_AUDIENCE is not set"),
        ({**SECURE, "PARLEY_OIDC_LEEWAY_SECONDS": "soon"}, "PARLEY_OIDC_LEEWAY_SECONDS: "),
        ({**SECURE, "PARLEY_OIDC_SCOPES": "profile"}, "PARLEY_OIDC_SCOPES: .*'openid'"),
        ({"PARLEY_OIDC_CLIENT_ID": "page"}, "PARLEY_OIDC_CLIENT_ID is set but PARLEY_OIDC_ISSUER"),
    ]:
        with pytest.raises(ValueError, match=f"^{says}") as refused:
            OidcSettings.from_env(env)
        assert "\n" not in str(refused.value)
    assert not OidcSettings.from_env({}).enabled

    # What `parley gateway` prints: one line, no traceback, exit 1, before it listens.
    unreachable = f"http://127.0.0.1:{free_port()}"
    started = await asyncio.gather(
        asyncio.to_thread(gateway_start, {"PARLEY_OIDC_ISSUER": "ftp://idp.example"}),
        asyncio.to_thread(
            gateway_start, {"PARLEY_OIDC_ISSUER": unreachable, "PARLEY_OIDC_AUDIENCE": "x"}
        ),
    )
    for done, says in zip(
        started,
        [
            "PARLEY_OIDC_ISSUER: 'ftp://idp.example' is not an https URL",
            f"OIDC discovery failed: cannot reach {re.escape(unreachable)}/.well-known/",
        ],
        strict=True,
    ):
        assert done.returncode == 1, (done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert re.search(f"^error: {says}", lines[0]), (says, lines[0])


async def test_the_page_signs_in_with_the_provider(
    parley_worker, page: Page, issuer: LocalIssuer
) -> None:
    """Chromium: the page offers the provider, goes to its /authorize, comes back with a
    code, exchanges it with the PKCE verifier, and lists the user's conversations."""
    sid = f"oidc-page-{uuid.uuid4().hex[:8]}"
    async with parley_worker(ToolRegistry([]), script({"content": "Hello, Carol."})) as convs:
        await convs.send(sid, "carol", "hello")
        for _ in range(100):  # visibility follows shortly
            if sid in [c.session_id for c in await convs.list("carol")]:
                break
            await asyncio.sleep(0.1)
        async with oidc_gateway(convs, issuer) as base:
            requests_before = len(issuer.token_requests)
            await page.goto(f"{base}/")
            sign_in = page.get_by_test_id("oidc-sign-in")
            await expect(sign_in).to_be_visible()
            await sign_in.click()
            await expect(page.get_by_test_id("me")).to_have_text("signed in as carol")
            listed = page.locator(f'[data-testid="conversation"][data-session-id="{sid}"]')
            await expect(listed).to_have_count(1)
            assert "code=" not in page.url and "state=" not in page.url
            token = await page.evaluate("sessionStorage.getItem('parley.oidc.token')")
            assert token and token.count(".") == 2
            assert await page.evaluate("localStorage.getItem('parley.token')") is None
            exchange = issuer.token_requests[requests_before:]
            assert len(exchange) == 1 and len(exchange[0]["code_verifier"]) >= 43
            assert exchange[0]["redirect_uri"] == f"{base}/"

            # Signing out forgets it; the provider is offered again.
            await page.locator("#sign-out").click()
            await expect(sign_in).to_be_visible()
            assert await page.evaluate("sessionStorage.getItem('parley.oidc.token')") is None
            await page.goto("about:blank")
