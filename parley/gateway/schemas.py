"""What the gateway's OpenAPI document promises, kept to what it sends, so a generated
client can use it. Client side (the gateway).

- ``ErrorResponse``: the one error shape, ``{"error": {"type", "message"}}``, documented
  for every status the routes answer (``ERROR_RESPONSES``: 401, 404, 409, 410, 413,
  422, 502, 503) in place of FastAPI's own validation-error schema, which is never sent;
- response models for the conversation, the listing and ``/v1/me``
  (``ConversationView`` leaves the internal ``model_context`` and ``audit_archive``
  out, of the document and of the answer);
- ``/agui``'s ``RunAgentInput`` body and the ``text/event-stream`` replies
  (``SSE_REPLY``), which FastAPI cannot see in a route that reads its body itself.

Parley's contracts serialize through a wrap serializer (empty defaults are left out),
which pydantic's serialization-mode schema cannot describe: the app documents its
models in validation mode (``separate_input_output_schemas=False``), which is what the
answers are (a field left out is one that has a default).
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput
from fastapi import FastAPI
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from parley.client.visibility import ConversationSummary
from parley.contracts import AuditArchiveRef, ContextRef, ConversationSnapshot


class ErrorDetail(BaseModel):
    type: str = Field(description="A stable error type, e.g. NotFound, DecisionsOwed.")
    message: str = Field(description="One line saying what was wrong and how to fix it.")


class ErrorResponse(BaseModel):
    error: ErrorDetail


_WHEN = {
    401: "No bearer token, or one the gateway does not know (read before any body).",
    404: "No such conversation, or another user's (the same answer).",
    409: "Not now: decisions are owed, a turn is running, or the conversation ended.",
    410: "What the conversation stored (older messages, audit entries, large payloads) "
    "was deleted by the payload store's retention; the message says when.",
    413: "The body is larger than PARLEY_GATEWAY_MAX_BODY_BYTES, or the message too long.",
    422: "Bad input: the message, the decisions, a resume or a parameter.",
    502: "Temporal refused the request.",
    503: "No worker serves the conversation's task queue (a decision is kept and applies "
    "once one does).",
}
#: Every error status a ``/v1`` or ``/agui`` route may answer, in the one shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": when} for status, when in _WHEN.items()
}


class ConversationView(ConversationSnapshot):
    """``GET /v1/conversations/{id}``: the conversation's page, and its Temporal UI link."""

    model_context: SkipJsonSchema[ContextRef | None] = Field(default=None, exclude=True)
    audit_archive: SkipJsonSchema[AuditArchiveRef | None] = Field(default=None, exclude=True)
    temporal_ui_url: str | None = None


class ConversationListItem(ConversationSummary):
    temporal_ui_url: str | None = None


class ConversationList(BaseModel):
    conversations: list[ConversationListItem]


class AuditExportHeader(BaseModel):
    """Where an audit export starts and ends (``parley.client.audit``'s header line)."""

    kind: str
    version: int
    session_id: str
    workflow_id: str
    run_id: str | None
    offset: int
    count: int
    total: int
    anchor: str | None
    head: str | None
    exported_at: str


class AuditExportEntry(BaseModel):
    """One chained audit entry, as an export line carries it."""

    kind: str
    offset: int
    at: str
    event: str
    actor: str | None
    tool_call_id: str | None
    name: str | None
    args_hash: str | None
    channel: str | None
    detail: dict[str, Any]
    prev_hash: str | None
    hash: str | None


class AuditExport(BaseModel):
    """``GET .../audit?format=json``: the export's lines as one object."""

    header: AuditExportHeader
    entries: list[AuditExportEntry]


class Me(BaseModel):
    user_id: str
    namespace: str
    temporal_ui_url: str | None = None


def sse_reply(what: str) -> dict[int | str, dict[str, Any]]:
    """A 200 that is a stream of AG-UI events as Server-Sent Events."""
    return {
        200: {
            "description": f"{what}: AG-UI events as Server-Sent Events (`id:` the event's "
            "offset in the conversation's log, `data:` one AG-UI event as JSON).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    }


#: ``/agui``'s body, read by the route itself: documented here.
RUN_AGENT_INPUT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}},
    }
}


def document(app: FastAPI) -> None:
    """The app's OpenAPI document, with ``RunAgentInput`` and its parts as components."""
    app.separate_input_output_schemas = False

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = FastAPI.openapi(app)
            # AG-UI's parts under a prefix of their own: never a clash with Parley's.
            schema = RunAgentInput.model_json_schema(
                by_alias=True, ref_template="#/components/schemas/AgUi{model}"
            )
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            for name, part in schema.pop("$defs", {}).items():  # generators name by title
                components[f"AgUi{name}"] = {**part, "title": f"AgUi{name}"}
            components["RunAgentInput"] = schema
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
