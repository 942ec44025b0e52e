"""The preview and inverse of ``create_plan``, and ``delete_plan``. Activity side.

The preview runs in the ``preview_call`` activity, ``delete_plan`` in ``run_tool``, on the
worker that holds the plans service's URL and key (``plans.build_plans_toolset`` hands
them its ``JsonApiClient`` and its rule for the body ``create_plan`` sends).

- ``create_plan``'s preview: the row it would write (the body it would send, for the
  conversation's user, as a draft) and the user's plans of the same title (read with
  ``GET /plans``: nothing is written).
- Its inverse: ``delete_plan(plan_id, expected_status)``, which deletes that plan only
  while it still has the status it was created with (``DELETE /plans/{id}
  ?expected_status=...``: the service checks and deletes in one transaction, and
  answers 409, a ``ToolInputError`` saying what the plan is now, when it changed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from langchain_core.tools import InjectedToolArg, tool

from parley.activities.http import JsonApiClient
from parley.contracts import InverseCall, ToolContext
from parley.contracts.errors import ToolInputError, ToolPermissionError
from parley.tools import ParleyTool

#: ``create_plan``'s body for (title, description, due_date), as the tool sends it.
CreateBody = Callable[[str, str | None, str | None], dict[str, Any]]

#: How many plans of the same title a preview lists (it counts them all).
SAME_TITLE_SHOWN = 20
STATUSES = ("draft", "active", "done", "cancelled")


def _title_key(title: str) -> str:
    return " ".join(str(title).split()).casefold()


def prepare_delete_args(args: dict[str, Any]) -> dict[str, Any]:
    """The status a delete expects, as the rules and the user see it."""
    status = args.get("expected_status")
    if not isinstance(status, str):
        return args
    status = status.strip().lower()
    if status not in STATUSES:
        raise ToolInputError(f"expected_status {status!r} is not one of {', '.join(STATUSES)}")
    return {**args, "expected_status": status}


def inverse_of_create(args: dict[str, Any], payload: Any) -> InverseCall | None:
    """Delete the plan a run created, while it still has the status it was created with."""
    if not isinstance(payload, dict) or not isinstance(payload.get("id"), int):
        return None
    return InverseCall(
        name="delete_plan",
        args={"plan_id": payload["id"], "expected_status": payload.get("status") or "draft"},
    )


class PlanUndo:
    """The preview of ``create_plan`` and the ``delete_plan`` tool, over one backend."""

    def __init__(self, api: JsonApiClient, create_body: CreateBody) -> None:
        self.api, self.create_body = api, create_body

    async def preview_create(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """The row ``create_plan`` would write with these (canonical) arguments, and the
        user's plans that already have its title."""
        try:
            body = self.create_body(args["title"], args.get("description"), args.get("due_date"))
        except ToolInputError as err:
            return {"refused": err.message}
        row = {"user_id": context.user_id, "status": "draft", **body}
        plans = await self.api.request("GET", "/plans", user_id=context.user_id)
        same = [
            {key: plan.get(key) for key in ("id", "title", "status", "due_date")}
            for plan in plans
            if _title_key(plan.get("title", "")) == _title_key(row["title"])
        ]
        return {"row": row, "same_title": same[:SAME_TITLE_SHOWN], "same_title_count": len(same)}

    async def preview_delete(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """The plan ``delete_plan`` would delete, or why it would refuse."""
        plan_id, expected = int(args["plan_id"]), args.get("expected_status")
        try:
            row = await self.api.request("GET", f"/plans/{plan_id}", user_id=context.user_id)
        except (ToolInputError, ToolPermissionError) as err:
            return {"plan_id": plan_id, "refused": err.message}
        shown = {key: row.get(key) for key in ("id", "title", "status", "due_date")}
        if expected is not None and row.get("status") != expected:
            return {
                "plan_id": plan_id,
                "row": shown,
                "refused": f"plan {plan_id} is {row.get('status')} now, not {expected}: it "
                "changed since",
            }
        return {"plan_id": plan_id, "row": shown, "deletes": True}

    def delete_tool(self) -> ParleyTool:
        api = self.api

        @tool(parse_docstring=True)
        async def delete_plan(
            plan_id: int,
            context: Annotated[ToolContext, InjectedToolArg],
            expected_status: str | None = None,
        ) -> dict[str, Any]:
            """Delete one of the user's plans. Waits for the user's approval.

            Args:
                plan_id: The plan's id, from list_plans or create_plan.
                expected_status: Delete only while the plan has this status (draft,
                    active, done, cancelled); if it changed, nothing is deleted.
            """
            ctx = context if isinstance(context, ToolContext) else ToolContext(**context)
            params = {"expected_status": expected_status} if expected_status else None
            return await api.request(
                "DELETE", f"/plans/{int(plan_id)}", user_id=ctx.user_id, params=params,
                idempotency_key=ctx.idempotency_key,
            )  # fmt: skip

        return ParleyTool(
            delete_plan, "confirm", prepare=prepare_delete_args, preview=self.preview_delete
        )
