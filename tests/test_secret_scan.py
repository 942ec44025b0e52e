"""An approval link is a secret everywhere: no secret reaches a span, a log line, a
metric or an error page.

Reported: the gateway's span for ``GET /links/{token}`` carried the live token in
``http.target`` and ``http.url``, and a token read from the trace, POSTed back,
approved the call. Here real ``parley worker`` and ``parley gateway`` processes, and
``parley send``/``approve`` commands, run with a link secret, a tokens file, the plans
service's key and the model's key (each with ``SECRET`` in it), all exporting traces to
an OTLP receiver on 127.0.0.1; the worker serves Prometheus metrics. Every surface is
driven once: the CLI, the REST API, a link's page and its decision, an AG-UI run,
refusals (a used, forged, expired and cut link, a bad bearer token, a path no route
has) and a query string carrying a key. The plain path is proved first (the link
decides its call, the tool runs against the plans service), so the scan cannot pass
for want of anything to scan; then no span (name, attributes, events, status), log
line, command output or metric holds a secret or a link's token. One module fixture
shares the processes between the three checks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.testing import WorkflowEnvironment

from parley.config.settings import Settings
from parley.contracts.links import ApprovalLink
from parley.gateway.access import TokenTable
from parley.observability.redaction import remember_values
from parley.observability.tracing import RedactingExporter
from parley.storage import LocalFileStorageDriver
from parley.storage.s3 import S3Config
from parley.tools.loading import GitConfig, ModelConfig, PlansConfig, ToolsetContext
from tests.support.cli import parley
from tests.support.gateway import auth, sse_events
from tests.support.openai_fake import FakeOpenAI
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.plans import plans_service
from tests.support.ports import free_port
from tests.support.processes import PARLEY_MODULE, cli_env, process
from tests.support.transcripts import new_session
from tests.support.waiting import eventually
from tests.support.webhook import Webhook

LINK_SECRET = "link-SECRET-7f3a9c1e5b2d4f6a8c0e2b4d6f8a0c2e"
PLANS_KEY = "plans-SECRET-key-4e1c8a2f6b0d"
OPENAI_KEY = "sk-SECRET-openai-9b7d5f3a1c0e"
ALICE_TOKEN = "tok-SECRET-alice-3d5f7b9a1c"
BOB_TOKEN = "tok-SECRET-bob-8a6c4e2f0b1d"
WRONG_TOKEN = "tok-SECRET-wrong-5c3a1e9f7d2b"
SECRETS = (LINK_SECRET, PLANS_KEY, OPENAI_KEY, ALICE_TOKEN, BOB_TOKEN, WRONG_TOKEN)
USER = "alice"


@dataclass
class Scene:
    """What driving every surface left: the answers, the link tokens, and everything
    the processes exported, logged, printed and served."""

    cli_session: str
    rest_session: str
    plans: list[dict[str, Any]]
    answers: dict[str, httpx.Response] = field(default_factory=dict)
    agui_events: list[str] = field(default_factory=list)
    cli_results: dict[str, Any] = field(default_factory=dict)
    #: The notifications' webhook: its URL may carry a token too (Slack's do).
    webhook_url: str = ""
    tokens: list[str] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)


def link_tokens(webhook: Webhook) -> list[str]:
    """Every link token the worker's notifications carried."""
    return [
        entry[action].rsplit("/links/", 1)[1]
        for _, body in webhook.requests
        for entry in body.get("links", [])
        for action in ("approve", "reject")
    ]


def link_of(webhook: Webhook, session: str, action: str) -> str:
    for _, body in webhook.requests:
        if body["session_id"] == session:
            return body["links"][0][action]
    raise AssertionError(f"no notification for {session}")


@pytest.fixture(scope="module")
async def scene(
    temporal_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Scene]:
    home = tmp_path_factory.mktemp("secret-scan")
    client = temporal_env.client
    port, metrics_port = free_port(), free_port()
    gateway = f"http://127.0.0.1:{port}"
    (home / "tokens").write_text(f"alice {ALICE_TOKEN}\nbob {BOB_TOKEN}\n")
    with (
        OtlpReceiver() as receiver,
        FakeOpenAI(api_key=OPENAI_KEY) as model,
        plans_service(home, api_key=PLANS_KEY) as plans,
        Webhook(200) as webhook,
    ):
        env = {
            **cli_env(client, payload_store, f"parley-scan-{uuid.uuid4().hex[:8]}"),
            "PARLEY_MODEL": "openai:gpt-test",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": OPENAI_KEY,
            "PARLEY_TOOLS": "parley.activities.toolsets.plans:toolset",
            "PARLEY_PLANS_URL": plans.url,
            "PARLEY_PLANS_API_KEY": PLANS_KEY,
            "PARLEY_LINK_SECRET": LINK_SECRET,
            "PARLEY_NOTIFY_URL": webhook.url,
            "PARLEY_GATEWAY_URL": gateway,
            "PARLEY_GATEWAY_TOKENS_FILE": str(home / "tokens"),
            "PARLEY_GATEWAY_PORT": str(port),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not the default 5 s
        }
        worker_env = {
            **env,
            "PARLEY_LOG_FORMAT": "json",
            "PARLEY_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}",
        }
        cli_session, rest_session, agui_session = new_session(), new_session(), new_session()
        with (
            process([*PARLEY_MODULE, "worker"], worker_env, home / "worker.log"),
            process([*PARLEY_MODULE, "gateway"], env, home / "gateway.log"),
        ):
            await eventually(
                lambda: httpx.get(f"{gateway}/healthz", timeout=5).status_code == 200,
                60,
                "the gateway serves",
                ignoring=(httpx.TransportError,),
            )
            found = Scene(cli_session, rest_session, [])
            await _drive(found, gateway, env, model, webhook, agui_session)
            metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
            found.texts["worker metrics"] = metrics
            found.plans = httpx.get(
                f"{plans.url}/plans",
                headers={"Authorization": f"Bearer {PLANS_KEY}", "X-Parley-User": USER},
            ).json()
            expected = {
                "GET /links/{token}",
                "POST /links/{token}",
                "POST /agui",
                "parley approve",
                "execute_tool create_plan",
            }
            await eventually(
                lambda: expected <= {s.name for s in receiver.spans}, 60, "every span exported"
            )
        found.spans = list(receiver.spans)  # the processes have stopped: all exported
        found.tokens = link_tokens(webhook)
        found.webhook_url = webhook.url
        found.texts["worker log"] = (home / "worker.log").read_text(errors="replace")
        found.texts["gateway log"] = (home / "gateway.log").read_text(errors="replace")
        yield found


async def _drive(
    scene: Scene,
    gateway: str,
    env: dict[str, str],
    model: FakeOpenAI,
    webhook: Webhook,
    agui_session: str,
) -> None:
    """Every surface once, in the order a person would meet them."""
    # The CLI: a message whose call waits, then its approval.
    model.reply("", tool_calls=[{"name": "create_plan", "args": {"title": "Alpha"}, "id": "a1"}])
    model.reply("Created Alpha.")
    sent = await asyncio.to_thread(
        parley, env, "send", "--session", scene.cli_session, "--user", USER, "plan alpha"
    )
    approved = await asyncio.to_thread(
        parley, env, "approve", "--session", scene.cli_session, "--user", USER, "--json"
    )
    scene.cli_results = {"send": sent, "approve": approved}
    for name, done in scene.cli_results.items():
        scene.texts[f"parley {name} output"] = done.stdout + done.stderr

    model.reply("", tool_calls=[{"name": "create_plan", "args": {"title": "Beta"}, "id": "b1"}])
    model.reply("Created Beta.")
    model.reply("Hello from the model.")
    answers = scene.answers
    async with httpx.AsyncClient(base_url=gateway, headers=auth(ALICE_TOKEN), timeout=60) as http:
        # The REST API: a message whose call waits; its notification brings the links.
        answers["message"] = await http.post(
            f"/v1/conversations/{scene.rest_session}/messages", json={"text": "plan beta"}
        )
        await eventually(
            lambda: any(b["session_id"] == scene.rest_session for _, b in webhook.requests),
            60,
            "the webhook gets the links",
        )
        approve = link_of(webhook, scene.rest_session, "approve")
        reject = link_of(webhook, scene.rest_session, "reject")
        # The link: its page, its decision, and every refusal after.
        answers["link page"] = await http.get(approve, headers={})
        answers["link decision"] = await http.post(approve)
        answers["link used"] = await http.post(approve)
        answers["link used, with the token in a query"] = await http.get(
            f"{approve}?token={approve.rsplit('/', 1)[1]}"
        )
        answers["other link of a decided call"] = await http.post(reject)
        answers["forged link"] = await http.post(approve[:-3] + "abc")
        expired = ApprovalLink(
            session_id=scene.rest_session, tool_call_id="b1", args_hash="0" * 16,
            user_id=USER, action="approve",
            expires=int((datetime.now(UTC) - timedelta(minutes=1)).timestamp()),
        )  # fmt: skip
        answers["expired link"] = await http.post(f"/links/{expired.sign(LINK_SECRET)}")
        answers["no route"] = await http.get(f"{approve}/more")
        # The REST API's refusals, and a key in a query string.
        answers["state"] = await http.get(
            f"/v1/conversations/{scene.rest_session}", params={"api_key": PLANS_KEY}
        )
        answers["bad bearer token"] = await http.get("/v1/conversations", headers=auth(WRONG_TOKEN))
        answers["another user's conversation"] = await http.get(
            f"/v1/conversations/{scene.rest_session}", headers=auth(BOB_TOKEN)
        )
        # AG-UI: one run.
        run = {
            "threadId": agui_session,
            "runId": "run-1",
            "messages": [{"id": "m1", "role": "user", "content": "hello"}],
        }
        async with http.stream("POST", "/agui", json=run) as stream:
            assert stream.status_code == 200, await stream.aread()
            scene.agui_events = [event.type async for event in sse_events(stream)]


async def test_the_plain_path_works_so_the_scan_has_something_to_find(scene: Scene) -> None:
    sent, approved = scene.cli_results["send"], scene.cli_results["approve"]
    assert sent.returncode == 0 and "create_plan" in sent.stdout, sent
    assert approved.returncode == 0 and '"status": "completed"' in approved.stdout, approved
    assert scene.answers["message"].json()["status"] == "awaiting_approval"
    page = scene.answers["link page"]
    assert page.status_code == 200 and "Beta" in page.text and "<form" in page.text
    decided = scene.answers["link decision"]
    assert decided.status_code == 200, decided.text
    assert "You approved create_plan; it ran: success." in decided.text
    # The tool ran against the plans service with its key, for both conversations.
    assert sorted(plan["title"] for plan in scene.plans) == ["Alpha", "Beta"]
    assert scene.agui_events[0] == "RUN_STARTED" and scene.agui_events[-1] == "RUN_FINISHED"
    # The tokens were live, and they are what a scan looks for.
    assert scene.tokens and all(token.count(".") == 1 for token in scene.tokens)
    statuses = {name: answer.status_code for name, answer in scene.answers.items()}
    assert statuses == {
        "message": 200,
        "link page": 200,
        "link decision": 200,
        "link used": 409,
        "link used, with the token in a query": 409,
        "other link of a decided call": 409,
        "forged link": 403,
        "expired link": 410,
        "no route": 404,
        "state": 200,
        "bad bearer token": 401,
        "another user's conversation": 404,
    }
    # The spans are there: the link's request span, named and targeted by its route.
    (link_span, *_) = [s for s in scene.spans if s.name == "POST /links/{token}"]
    assert link_span.service == "parley-gateway"
    assert link_span.attributes.get("http.target") == "/links/{token}", link_span.attributes
    services = {s.service for s in scene.spans}
    assert {"parley-gateway", "parley-worker", "parley-cli"} <= services, services


def test_the_link_pages_send_no_referrer_and_are_never_stored(scene: Scene) -> None:
    for name in (
        "link page",
        "link decision",
        "link used",
        "link used, with the token in a query",
        "other link of a decided call",
        "forged link",
        "expired link",
        "no route",
    ):
        headers = scene.answers[name].headers
        assert headers.get("referrer-policy") == "no-referrer", (name, headers)
        assert headers.get("cache-control") == "no-store", (name, headers)


def test_no_secret_and_no_link_token_reaches_a_span_a_log_line_or_a_metric(
    scene: Scene,
) -> None:
    # Whole tokens, and each one's signature alone (the part that makes it work).
    wanted = [
        *SECRETS,
        scene.webhook_url,
        *scene.tokens,
        *(token.split(".", 1)[1] for token in scene.tokens),
    ]
    leaks = [
        (where, secret) for where, text in _surfaces(scene) for secret in wanted if secret in text
    ]
    assert leaks == [], leaks[:20]
    # The check would have seen one: the processes logged, and what the webhook got
    # is a token of the kind the scan looks for.
    assert "running tool create_plan" in scene.texts["worker log"]
    assert all(text for text in scene.texts.values())


def _surfaces(scene: Scene) -> list[tuple[str, str]]:
    """Every text a secret could be in: each span's name, attributes, events and status;
    each log, command output and metric page; each error page the gateway sent."""
    found = [(where, text) for where, text in scene.texts.items()]
    for span in scene.spans:
        where = f"span {span.service}: {span.name}"
        found.append((where, span.name))
        found.append((where, repr(span.attributes)))
        found.append((where, repr(span.events)))
        found.append((where, span.status_message))
    for name, answer in scene.answers.items():
        if answer.status_code >= 400:
            found.append((f"answer {name}", f"{answer.headers!r} {answer.text}"))
    return found


def test_no_config_shows_a_secret_in_its_repr() -> None:
    settings = Settings(
        link_secret=LINK_SECRET,
        plans_api_key=PLANS_KEY,
        openai_api_key=OPENAI_KEY,
        aws_access_key_id="AKIA-SECRET-0123",
        aws_secret_access_key="aws-SECRET-0123456789",
        aws_session_token="aws-SECRET-session-0123",
    )
    shown = [
        repr(settings),
        repr(PlansConfig.from_settings(settings)),
        repr(ModelConfig.from_settings(settings, "gpt-test")),
        repr(GitConfig.from_settings(settings)),
        repr(ToolsetContext(env={"ACME_KEY": "acme-SECRET-0123"})),
        repr(S3Config(None, None, "AKIA-SECRET-0123", "aws-SECRET-0123456789", "t-SECRET-01")),
        repr(TokenTable({ALICE_TOKEN: "alice", BOB_TOKEN: "bob"})),
    ]
    assert [text for text in shown if "SECRET" in text] == []
    assert "alice" in shown[-1] and "plans_url" in shown[0]


def test_every_exported_span_passes_through_redaction() -> None:
    """The exporter's own guard, whatever made the span: a value the process remembered,
    and anything shaped like a key or a link's token, in its name, attributes, events
    (an exception's message and traceback) and status."""
    remember_values([BOB_TOKEN])
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingExporter(memory)))
    token = ApprovalLink(
        session_id="s", tool_call_id="c", args_hash="h", user_id="u", action="approve",
        expires=2_000_000_000,
    ).sign(LINK_SECRET)  # fmt: skip
    with (
        pytest.raises(RuntimeError),
        provider.get_tracer("test").start_as_current_span(f"open {token}") as span,
    ):
        span.set_attribute("peer", f"Bearer {BOB_TOKEN}")
        span.set_attribute("keys", [OPENAI_KEY, "plain"])
        raise RuntimeError(f"refused {BOB_TOKEN} for /links/{token}")
    (exported,) = memory.get_finished_spans()
    text = repr(
        (exported.name, dict(exported.attributes or {}), exported.status.description)
    ) + repr([(e.name, dict(e.attributes or {})) for e in exported.events])
    assert [s for s in (token, BOB_TOKEN, OPENAI_KEY) if s in text] == []
    assert exported.name == "open [redacted]" and exported.attributes["keys"][1] == "plain"
    assert "RuntimeError" in text and "/links/[redacted]" in text
