"""``GET /v1/conversations/{id}/audit``: the conversation's audit log as ``parley audit``
exports it (``parley.client.audit``: a header, then one chained entry a line). Client side (the
gateway)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response

from parley.client.audit import entry_record, export_lines, header_record, read_log
from parley.gateway.deps import Gateway, current_groups, current_user, gateway, guarded, session
from parley.gateway.schemas import ERROR_RESPONSES, AuditExport

router = APIRouter(responses=ERROR_RESPONSES)


@router.get(
    "/v1/conversations/{session_id}/audit",
    tags=["conversations"],
    response_class=Response,
    responses={
        200: {
            "description": "JSON lines: a header, then every audit entry the conversation "
            "keeps, oldest first, each chained to the one before by hash "
            "(`parley audit --verify` checks a saved copy); with `format=json`, the "
            "same lines as one object.",
            # With the model as application/json beside x-ndjson (which no generator
            # knows), a generated client reads the JSON form (and asks format=json).
            "model": AuditExport,
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    },
)
async def export_audit(
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
    format_: Literal["jsonl", "json"] = Query(
        default="jsonl",
        alias="format",
        description="jsonl (the file `parley audit` writes and verifies) or json (one "
        "object: header and entries, for generated clients).",
    ),
) -> Response:
    """Every decision with its call, argument hash, decider, channel and time, chained."""
    log = await guarded(session_id, read_log(gw.conversations, session_id, user_id, groups))
    if format_ == "json":
        entries = [entry_record(e, n) for n, e in enumerate(log.entries, start=log.offset)]
        export = AuditExport.model_validate({"header": header_record(log), "entries": entries})
        return JSONResponse(export.model_dump(mode="json"))
    body = "".join(line + "\n" for line in export_lines(log))
    return Response(
        body,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{session_id}.audit.jsonl"'},
    )
