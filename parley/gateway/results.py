"""``GET /v1/conversations/{id}/results/{call_id}``: one tool call's result, whole, as
``parley result`` gives it (``parley.client.results``: from the payload store, read by
the conversation's owner or a reviewer). Client side (the gateway).

The transcript's copy of a long result is what the model read (its beginning, with a
note); this route streams the content as the tool returned it, or with
``format=json`` the whole envelope. A result retention deleted answers 410
``DeletedByRetention``, like every read of what a conversation stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse

from parley.client.results import whole_result
from parley.contracts import ToolResult
from parley.gateway.deps import Gateway, current_groups, current_user, gateway, guarded, session
from parley.gateway.schemas import ERROR_RESPONSES

router = APIRouter(responses=ERROR_RESPONSES)

#: Sent a piece at a time: a result of megabytes is never encoded whole at once.
CHUNK_CHARS = 1 << 16


class WholeResultView(ToolResult):
    """A tool call's whole result (``format=json``): its envelope, named."""

    tool_call_id: str
    name: str


@router.get(
    "/v1/conversations/{session_id}/results/{call_id}",
    tags=["conversations"],
    response_class=Response,
    responses={
        200: {
            "description": "The call's result as the tool returned it, however long (the "
            "transcript holds what the model read: a long result's beginning); with "
            "`format=json`, its whole envelope.",
            "model": WholeResultView,
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def get_result(
    session_id: str = Depends(session),
    call_id: str = Path(min_length=1, max_length=256, description="The tool call's id."),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
    format_: Literal["text", "json"] = Query(
        default="text",
        alias="format",
        description="text (the content, as the tool returned it) or json (the envelope: "
        "status, content, payload, error).",
    ),
) -> Response:
    """One tool call's whole result (its owner's and reviewers' to read)."""
    whole = await guarded(
        session_id, whole_result(gw.conversations, session_id, user_id, call_id, groups)
    )
    envelope = whole.result
    if format_ == "json":
        view = WholeResultView(
            tool_call_id=whole.tool_call_id, name=whole.name, **envelope.model_dump()
        )
        return JSONResponse(view.model_dump(mode="json"))
    content = envelope.content

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(content), CHUNK_CHARS):
            yield content[start : start + CHUNK_CHARS].encode("utf-8")

    return StreamingResponse(
        pieces(),
        media_type="text/plain; charset=utf-8",
        headers={
            "Content-Disposition": f'inline; filename="{_file_name(whole.tool_call_id)}.txt"',
            "X-Parley-Result-Status": envelope.status,
        },
    )


def _file_name(call_id: str) -> str:
    """A call id as a file name any header carries (a provider's id may hold anything)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", call_id)[:128] or "result"
