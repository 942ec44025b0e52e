"""``GET /v1/conversations/{id}/audit``: the conversation's audit log as ``parley audit``
exports it (``parley.audit``: a header, then one chained entry a line). Client side (the
gateway)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from parley.audit import export_lines, read_log
from parley.gateway.deps import Gateway, current_user, gateway, guarded, session
from parley.gateway.schemas import ERROR_RESPONSES

router = APIRouter(responses=ERROR_RESPONSES)


@router.get(
    "/v1/conversations/{session_id}/audit",
    tags=["conversations"],
    response_class=Response,
    responses={
        200: {
            "description": "JSON lines: a header, then every audit entry the conversation "
            "keeps, oldest first, each chained to the one before by hash "
            "(`parley audit --verify` checks a saved copy).",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    },
)
async def export_audit(
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    gw: Gateway = Depends(gateway),
) -> Response:
    """Every decision with its call, argument hash, decider, channel and time, chained."""
    log = await guarded(session_id, read_log(gw.conversations, session_id, user_id))
    body = "".join(line + "\n" for line in export_lines(log))
    return Response(
        body,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{session_id}.audit.jsonl"'},
    )
