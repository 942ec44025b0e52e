"""The worker's one HTTP client is made by its entry point and injected: the plans
toolset (handed it in its ``PlansConfig``) and the notify activity use the client they
are given, against a real plans service on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import httpx

from parley.config.settings import Settings
from parley.contracts import ToolContext
from parley.services.plans import BackgroundServer, create_app
from parley.tools import load_registry

KEY = "worker-http-test-key"
CONTEXT = ToolContext(
    user_id="alice", session_id="s", workflow_id="conversation-s", tool_call_id="c1"
)


async def test_the_toolset_sends_through_the_client_it_is_given(tmp_path: Path) -> None:
    sent: list[str] = []

    async def record(request: httpx.Request) -> None:
        sent.append(f"{request.method} {request.url.path}")

    with BackgroundServer(create_app(tmp_path / "plans.db", KEY)) as server:
        async with httpx.AsyncClient(event_hooks={"request": [record]}) as client:
            registry = load_registry(
                "parley.activities.toolsets.plans:toolset",
                settings=Settings(plans_api_key=KEY, plans_url=server.url),
                http_client=client,
            )
            tools = {t.name: t.tool for t in registry.tools()}
            listed = await tools["list_plans"].ainvoke({"context": CONTEXT.model_dump()})
    assert listed == {"plans": [], "count": 0}
    assert sent == ["GET /plans"]
