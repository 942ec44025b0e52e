"""The plans toolset: create, list, read and update plans on a REST backend.

Activity side of the Temporal boundary: these tools run inside the ``run_tool`` activity
on the worker, which alone holds the backend's URL and API key (``PARLEY_PLANS_URL``,
``PARLEY_PLANS_API_KEY``); neither ever enters workflow input or history.

Every request carries the conversation's ``user_id`` (``X-Parley-User``); every write
carries ``Idempotency-Key: <workflow_id>:<tool_call_id>``, so an activity retried after
a lost answer never creates or changes twice. ``create_plan`` normalizes the title
first (``parley.activities.toolsets.titles``): a whole request sentence becomes the
title it names, and the sentence is kept in the description. Failures come from
``parley.activities.http``'s one mapping:
422/400/404/409 are ``ToolInputError`` the model can fix, 401/403 a neutral
``ToolPermissionError``, 408/429/5xx and connection failures a retried ``TransientError``.

``create_plan`` declares a preview (the row it would write, and the user's plans of
the same title) and an inverse, ``delete_plan`` (``plans_previews``).

The reference backend is ``parley.services.plans`` (``parley plans-service``).
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from langchain_core.tools import InjectedToolArg, tool

from parley.activities.http import JsonApiClient
from parley.activities.toolsets.plans_previews import PlanUndo, inverse_of_create
from parley.activities.toolsets.titles import normalize_plan_title
from parley.contracts import ToolContext
from parley.contracts.errors import ToolInputError
from parley.tools import ParleyTool, auto, one_script
from parley.tools.loading import PlansConfig, factory

SERVICE_NAME = "the plans service"
TITLE_MAX = 80
DESCRIPTION_MAX = 4000


def _context(context: ToolContext | dict[str, Any]) -> ToolContext:
    return context if isinstance(context, ToolContext) else ToolContext.model_validate(context)


def plan_description(description: str | None, original: str, changed: bool) -> str | None:
    """The description to send: the model's, plus the original title text if it changed."""
    text = (description or "").strip()
    if changed and original.strip() and original.strip() not in text:
        note = f"Original request: {original.strip()}"
        text = f"{text}\n\n{note}" if text else note
    if len(text) > DESCRIPTION_MAX:
        text = text[: DESCRIPTION_MAX - 1] + "…"
    return text or None


def create_body(title: str, description: str | None, due_date: str | None) -> dict[str, Any]:
    """The body ``create_plan`` sends (and its preview shows): the normalized title,
    the description with the original title when it changed, the due date if given."""
    if not title.strip():
        raise ToolInputError("title must not be empty")
    normalized = normalize_plan_title(title, max_length=TITLE_MAX)
    body: dict[str, Any] = {
        "title": normalized.title,
        "description": plan_description(description, title, normalized.changed),
    }
    if due_date is not None:
        body["due_date"] = due_date
    return body


def prepare_create_plan_args(args: dict[str, Any]) -> dict[str, Any]:
    """F10 at proposal time: the title the user is asked to approve is the normalized
    one, and the sentence it came from moves into the description. Applied until it
    changes nothing (``ParleyTool.canonical_args``): ``title: title: prod-x`` is
    ``prod-x`` for the rules too, and the tool's own normalization of a canonical
    title changes nothing."""
    title = args.get("title")
    if not isinstance(title, str) or not title.strip():
        return args
    one_script(title)  # a look-alike spelling is refused, never matched by no rule
    normalized = normalize_plan_title(title, max_length=TITLE_MAX)
    if not normalized.changed:
        return args
    description = plan_description(args.get("description"), title, changed=True)
    return {**args, "title": normalized.title, "description": description}


def prepare_status_args(args: dict[str, Any]) -> dict[str, Any]:
    """The status a call will set, as the rules and the user see it."""
    status = args.get("status")
    return {**args, "status": status.strip().lower()} if isinstance(status, str) else args


def build_plans_toolset(
    base_url: str,
    api_key: str,
    client: httpx.AsyncClient | None = None,
    *,
    timeout: float = 10.0,
) -> list[ParleyTool]:
    """The four plan tools against the backend at ``base_url``, and ``delete_plan``
    (the inverse of ``create_plan``).

    ``client`` defaults to the worker's one shared ``httpx.AsyncClient``; ``timeout``
    bounds each request (seconds); a timeout is transient, retried with the same key.
    """
    if not api_key:
        raise ValueError("the plans toolset needs an API key (PARLEY_PLANS_API_KEY)")
    api = JsonApiClient(
        base_url, api_key=api_key, client=client, timeout=timeout, service_name=SERVICE_NAME
    )

    @tool(parse_docstring=True)
    async def create_plan(
        title: str,
        context: Annotated[ToolContext, InjectedToolArg],
        description: str | None = None,
        due_date: str | None = None,
    ) -> dict[str, Any]:
        """Create a plan for the user. Waits for the user's approval before it runs.

        Args:
            title: A short title, e.g. "Q3 review" (not the user's whole sentence).
            description: Optional longer text: goals, notes.
            due_date: Optional due date as YYYY-MM-DD.
        """
        ctx = _context(context)
        return await api.request(
            "POST", "/plans", user_id=ctx.user_id, json=create_body(title, description, due_date),
            idempotency_key=ctx.idempotency_key,
        )  # fmt: skip

    @tool
    async def list_plans(context: Annotated[ToolContext, InjectedToolArg]) -> dict[str, Any]:
        """List the user's plans: id, title, status, due date."""
        ctx = _context(context)
        plans = await api.request("GET", "/plans", user_id=ctx.user_id)
        return {"plans": plans, "count": len(plans)}

    @tool(parse_docstring=True)
    async def get_plan(
        plan_id: int, context: Annotated[ToolContext, InjectedToolArg]
    ) -> dict[str, Any]:
        """Read one of the user's plans.

        Args:
            plan_id: The plan's id, from list_plans or create_plan.
        """
        ctx = _context(context)
        return await api.request("GET", f"/plans/{int(plan_id)}", user_id=ctx.user_id)

    @tool(parse_docstring=True)
    async def update_plan_status(
        plan_id: int, status: str, context: Annotated[ToolContext, InjectedToolArg]
    ) -> dict[str, Any]:
        """Change the status of one of the user's plans. Waits for the user's approval.

        Args:
            plan_id: The plan's id, from list_plans or create_plan.
            status: One of draft, active, done, cancelled.
        """
        ctx = _context(context)
        return await api.request(
            "PATCH", f"/plans/{int(plan_id)}", user_id=ctx.user_id,
            json={"status": status.strip().lower()}, idempotency_key=ctx.idempotency_key,
        )  # fmt: skip

    undo = PlanUndo(api, create_body)
    return [
        ParleyTool(create_plan, "confirm", prepare=prepare_create_plan_args,
                   preview=undo.preview_create, compensate=inverse_of_create),
        auto(list_plans),
        auto(get_plan),
        ParleyTool(update_plan_status, "confirm", prepare=prepare_status_args),
        undo.delete_tool(),
    ]  # fmt: skip


@factory(PlansConfig)
def toolset(config: PlansConfig) -> list[ParleyTool]:
    """The toolset for ``PARLEY_TOOLS=parley.activities.toolsets.plans:toolset``, from its
    own config (``PARLEY_PLANS_URL``, ``PARLEY_PLANS_API_KEY``, the worker's HTTP client)."""
    if not config.api_key:
        raise ValueError(
            "PARLEY_PLANS_API_KEY is not set: give the worker the API key of the plans "
            "service at PARLEY_PLANS_URL"
        )
    return build_plans_toolset(config.url, config.api_key, config.http_client)
