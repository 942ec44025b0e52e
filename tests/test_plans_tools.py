"""The plans toolset against the real reference service on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from langchain_core.tools import BaseTool

from parley.activities.toolsets import plans as plans_toolset
from parley.activities.toolsets.plans import build_plans_toolset, toolset
from parley.config.settings import DEFAULT_PLANS_URL, Settings
from parley.contracts import ToolContext
from parley.contracts.errors import ToolInputError, ToolPermissionError, TransientError
from parley.services.plans import BackgroundServer
from parley.tools import ParleyTool, ToolRegistry
from parley.tools.loading import PlansConfig
from tests.support.plans import PLANS_KEY, inject_faults, seen_requests

ALICE = ToolContext(
    user_id="alice", session_id="s1", workflow_id="conversation-s1", tool_call_id="call-1"
)


def ctx(user: str = "alice", call: str = "call-1", session: str = "s1") -> ToolContext:
    return ToolContext(
        user_id=user, session_id=session, workflow_id=f"conversation-{session}", tool_call_id=call
    )


@pytest.fixture
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as shared:
        yield shared


@pytest.fixture
def tools(plans: BackgroundServer, http_client: httpx.AsyncClient) -> dict[str, BaseTool]:
    return {t.name: t.tool for t in build_plans_toolset(plans.url, PLANS_KEY, http_client)}


async def run(tool: BaseTool, context: ToolContext, **args: Any) -> Any:
    return await tool.ainvoke({**args, "context": context})


def test_names_policies_and_schemas(plans: BackgroundServer) -> None:
    built = build_plans_toolset(plans.url, PLANS_KEY)
    assert [(t.name, t.policy) for t in built] == [
        ("create_plan", "confirm"),
        ("list_plans", "auto"),
        ("get_plan", "auto"),
        ("update_plan_status", "confirm"),
        ("delete_plan", "confirm"),  # the inverse of create_plan (tests/test_inverses.py)
    ]
    for item in built:
        assert isinstance(item, ParleyTool) and item.wants_context
        assert "context" not in item.spec().args_schema["properties"]
    catalogue = ToolRegistry(built).catalogue()
    assert catalogue.get("create_plan").args_schema["required"] == ["title"]


async def test_create_twice_with_the_same_context_creates_one_row(
    tools: dict[str, BaseTool], plans: BackgroundServer
) -> None:
    first = await run(tools["create_plan"], ALICE, title="Q3 review", due_date="2030-09-30")
    again = await run(tools["create_plan"], ALICE, title="Q3 review", due_date="2030-09-30")
    assert again == first
    assert first["title"] == "Q3 review" and first["description"] is None
    assert first["user_id"] == "alice"
    listed = await run(tools["list_plans"], ALICE)
    assert listed["count"] == 1 and listed["plans"][0]["id"] == first["id"]
    requests = seen_requests(plans)
    assert {r["user"] for r in requests} == {"alice"}
    posts = [r for r in requests if r["method"] == "POST"]
    assert [r["idempotency_key"] for r in posts] == ["conversation-s1:call-1"] * 2
    assert [r["status"] for r in posts] == [201, 200]


async def test_create_normalizes_the_title_and_keeps_the_sentence(
    tools: dict[str, BaseTool],
) -> None:
    sentence = "帮我创建一个计划，标题是季度复盘"
    plan = await run(tools["create_plan"], ALICE, title=sentence)
    assert plan["title"] == "季度复盘"
    assert plan["description"] == f"Original request: {sentence}"

    english = "please create a plan called Q3 review for next week"
    plan = await run(tools["create_plan"], ctx(call="call-2"), title=english, description="KPIs")
    assert plan["title"] == "Q3 review"
    assert plan["description"] == f"KPIs\n\nOriginal request: {english}"


async def test_a_wrong_api_key_is_a_permission_error_that_hides_the_key(
    plans: BackgroundServer, http_client: httpx.AsyncClient
) -> None:
    wrong = "sk-wrong-secret-4711"
    tools = {t.name: t.tool for t in build_plans_toolset(plans.url, wrong, http_client)}
    with pytest.raises(ToolPermissionError) as caught:
        await run(tools["create_plan"], ALICE, title="Q3 review")
    error = caught.value
    assert error.http_status == 401
    assert error.body["code"] == "PGRST301" and set(error.body) >= {"message", "hint"}
    assert wrong not in error.message and wrong not in str(error.body)
    assert error.message == "the plans service refused the worker's credentials (HTTP 401)"


async def test_invalid_input_is_a_tool_input_error(tools: dict[str, BaseTool]) -> None:
    with pytest.raises(ToolInputError) as caught:
        await run(tools["create_plan"], ALICE, title="Q3 review", due_date="next Friday")
    assert caught.value.http_status == 422
    assert caught.value.body["code"] == "22023"
    assert "due_date" in caught.value.message

    plan = await run(tools["create_plan"], ctx(call="call-2"), title="Q3 review")
    with pytest.raises(ToolInputError) as caught:
        await run(tools["update_plan_status"], ctx(call="call-3"), plan_id=plan["id"], status="x")
    assert caught.value.http_status == 422

    with pytest.raises(ToolInputError):
        await run(tools["create_plan"], ctx(call="call-4"), title="   ")


async def test_users_are_isolated(tools: dict[str, BaseTool], plans: BackgroundServer) -> None:
    plan = await run(tools["create_plan"], ALICE, title="Alice's plan")
    bob = ctx(user="bob", session="s2")
    assert (await run(tools["list_plans"], bob)) == {"plans": [], "count": 0}
    with pytest.raises(ToolInputError) as caught:
        await run(tools["get_plan"], bob, plan_id=plan["id"])
    assert caught.value.http_status == 404
    with pytest.raises(ToolInputError):
        await run(tools["update_plan_status"], bob, plan_id=plan["id"], status="done")
    assert (await run(tools["get_plan"], ALICE, plan_id=plan["id"]))["status"] == "draft"
    assert {r["user"] for r in seen_requests(plans)} == {"alice", "bob"}


async def test_update_status_is_idempotent(
    tools: dict[str, BaseTool], plans: BackgroundServer
) -> None:
    plan = await run(tools["create_plan"], ALICE, title="Q3 review")
    call = ctx(call="call-2")
    updated = await run(tools["update_plan_status"], call, plan_id=plan["id"], status="Active")
    assert updated["status"] == "active"
    assert await run(tools["update_plan_status"], call, plan_id=plan["id"], status="active") == (
        updated
    )
    patches = [r for r in seen_requests(plans) if r["method"] == "PATCH"]
    assert [r["idempotency_key"] for r in patches] == ["conversation-s1:call-2"] * 2


async def test_a_500_then_200_is_a_retry_that_creates_once(
    tools: dict[str, BaseTool], plans: BackgroundServer
) -> None:
    inject_faults(plans, {"status": 500})
    with pytest.raises(TransientError) as caught:
        await run(tools["create_plan"], ALICE, title="Q3 review")
    assert caught.value.http_status == 500
    plan = await run(tools["create_plan"], ALICE, title="Q3 review")  # the activity's retry
    assert (await run(tools["list_plans"], ALICE))["plans"] == [plan]
    assert [r["status"] for r in seen_requests(plans)] == [500, 201, 200]


async def test_a_429_carries_retry_after(
    tools: dict[str, BaseTool], plans: BackgroundServer
) -> None:
    inject_faults(plans, {"status": 429, "retry_after": "3"})
    with pytest.raises(TransientError) as caught:
        await run(tools["list_plans"], ALICE)
    assert caught.value.http_status == 429 and caught.value.retry_after == 3.0


async def test_a_context_given_as_a_dict_works(tools: dict[str, BaseTool]) -> None:
    listed = await tools["list_plans"].ainvoke({"context": ALICE.model_dump()})
    assert listed == {"plans": [], "count": 0}


def test_toolset_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_PLANS_API_KEY", raising=False)
    monkeypatch.delenv("PARLEY_PLANS_URL", raising=False)
    with pytest.raises(ValueError, match="PARLEY_PLANS_API_KEY"):
        toolset(PlansConfig.from_settings(Settings.from_env()))
    monkeypatch.setenv("PARLEY_PLANS_API_KEY", PLANS_KEY)
    built = toolset(PlansConfig.from_settings(Settings.from_env()))
    assert len(built) == 5
    assert DEFAULT_PLANS_URL == "http://127.0.0.1:8765"
    assert plans_toolset.SERVICE_NAME == "the plans service"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"title": "帮我创建一个计划，标题是季度复盘"},
            {
                "title": "季度复盘",
                "description": "Original request: 帮我创建一个计划，标题是季度复盘",
            },
        ),
        ({"title": "Q3 review"}, {"title": "Q3 review"}),  # already a title: untouched
        (
            {"title": "please create a plan called Launch", "description": "notes"},
            {
                "title": "Launch",
                "description": "notes\n\nOriginal request: please create a plan called Launch",
            },
        ),
        ({"title": ""}, {"title": ""}),  # left for the tool to refuse
    ],
)
def test_create_plan_args_are_prepared_before_approval(args: dict, expected: dict) -> None:
    from parley.activities.toolsets.plans import prepare_create_plan_args

    assert prepare_create_plan_args(args) == expected
