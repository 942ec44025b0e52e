"""The gateway's FastAPI application: REST, Server-Sent Events, AG-UI and the approval
page. Client side (talks to Temporal through ``parley.client.Conversations``).

Every ``/v1`` and ``/agui`` request carries ``Authorization: Bearer <token>``; the
user id is the token's (``access``), never the body's. Another user's conversation
answers 404, exactly as a missing one does. Every error answers JSON
``{"error": {"type", "message"}}``: 401 unauthenticated, 404 not found, 409 not now
(decisions owed, turn running, ended), 413 too large, 422 bad input, 503 no worker.

Events are AG-UI events (``ag-ui-protocol``'s models and encoder); a stream's ``id:``
is the event's offset in the conversation's log, so a client resumes with
``Last-Event-ID``. Streams wait on the conversation's shared feed (``feeds``), never
on a poll loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

from ag_ui.core import (
    Event,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
)
from ag_ui.encoder import EventEncoder
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from parley.client import ConversationRefused, Conversations
from parley.contracts import (
    ConversationStatus,
    Decision,
    OffsetEvent,
    StateQuery,
    TurnResult,
    workflow_id_for,
)
from parley.errors import ErrorType
from parley.gateway.access import TokenTable
from parley.gateway.feeds import Feeds

AG_UI_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
#: A comment line every this many seconds keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0
#: A message id a client picks (for retries): short, and usable in an update id.
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"
MESSAGE_ID = re.compile(MESSAGE_ID_PATTERN)

#: Refusals and the HTTP status each answers.
HTTP_STATUS = {
    ErrorType.NOT_OWNER: 404,
    ErrorType.NOT_FOUND: 404,
    ErrorType.INVALID_SESSION: 422,
    ErrorType.INVALID_USER: 422,
    ErrorType.INVALID_MESSAGE: 422,
    ErrorType.INVALID_DECISION: 422,
    ErrorType.MESSAGE_TOO_LARGE: 413,
    ErrorType.DECISIONS_OWED: 409,
    ErrorType.NO_DECISIONS_OWED: 409,
    ErrorType.TURN_IN_PROGRESS: 409,
    ErrorType.CONVERSATION_ENDED: 409,
    ErrorType.NO_WORKER: 503,
    ErrorType.UNREACHABLE: 503,
}


class ApiError(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


def _error(status: int, error_type: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": error_type, "message": message}}, status_code=status)


def refused(refusal: ConversationRefused, session_id: str) -> ApiError:
    """A refusal as an HTTP error. Not the owner reads exactly as not found."""
    error_type = refusal.error_type or "Refused"
    status = HTTP_STATUS.get(error_type, 502)
    if status == 404:
        return ApiError(404, ErrorType.NOT_FOUND, f"conversation {session_id} not found")
    return ApiError(status, error_type, refusal.message)


# --- request bodies -------------------------------------------------------------------


class MessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="What the user says.")
    message_id: str | None = Field(
        default=None,
        pattern=MESSAGE_ID_PATTERN,
        description="Your id for this message: sending it again returns the first "
        "result and applies nothing twice.",
    )
    reviewers: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Users besides you who may read the conversation and decide on its "
        "calls; only when this message starts the conversation.",
    )


class DecisionsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: list[Decision] = Field(
        min_length=1, description="One decision for every pending call."
    )


# --- the application ------------------------------------------------------------------


def create_app(conversations: Conversations, tokens: TokenTable) -> FastAPI:
    settings = conversations.settings
    feeds = Feeds(conversations)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await feeds.aclose()

    app = FastAPI(
        title="Parley gateway",
        version="1",
        description="Parley conversations over HTTP: turns, decisions, AG-UI event "
        "streams, and an approval page at /.",
        lifespan=lifespan,
    )
    app.state.feeds = feeds
    bearer = HTTPBearer(auto_error=False)

    # --- errors: one JSON shape -------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return _error(err.status, err.error_type, err.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        problems = []
        for problem in err.errors():
            where = ".".join(str(p) for p in problem.get("loc", ()) if p != "body")
            problems.append(f"{where}: {problem.get('msg')}" if where else problem.get("msg"))
        return _error(422, "InvalidRequest", "; ".join(problems) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, err: StarletteHTTPException) -> JSONResponse:
        return _error(err.status_code, "HTTPError", str(err.detail))

    # --- dependencies -------------------------------------------------------------------

    async def current_user(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    ) -> str:
        if credentials is None:
            raise ApiError(
                401, "Unauthenticated", "send your token as 'Authorization: Bearer <token>'"
            )
        user_id = tokens.user_for(credentials.credentials)
        if user_id is None:
            raise ApiError(401, "Unauthenticated", "this token is not known to the gateway")
        return user_id

    def session(session_id: str) -> str:
        try:
            workflow_id_for(session_id)
        except ValueError as err:
            raise ApiError(422, ErrorType.INVALID_SESSION, str(err)) from None
        return session_id

    def workflow_link(session_id: str) -> str:
        return (
            f"{settings.temporal_ui_url.rstrip('/')}/namespaces/{settings.namespace}"
            f"/workflows/{workflow_id_for(session_id)}"
        )

    async def guarded(session_id: str, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except ConversationRefused as refusal:
            raise refused(refusal, session_id) from None

    # --- the page ---------------------------------------------------------------------

    static = resources.files("parley.gateway") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(static / "index.html"), headers={"Cache-Control": "no-cache"})

    @app.get("/healthz", tags=["gateway"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    # --- the API ----------------------------------------------------------------------

    @app.get("/v1/me", tags=["conversations"])
    async def me(user_id: str = Depends(current_user)) -> dict[str, str]:
        return {
            "user_id": user_id,
            "namespace": settings.namespace,
            "temporal_ui_url": settings.temporal_ui_url,
        }

    @app.get("/v1/conversations", tags=["conversations"])
    async def list_conversations(
        user_id: str = Depends(current_user),
        status: ConversationStatus | None = Query(
            default=None, description="Only conversations with this status."
        ),
        reviewing: bool = Query(
            default=False, description="Conversations of others that name you a reviewer."
        ),
    ) -> dict[str, Any]:
        """The caller's conversations from Temporal's visibility (search attributes),
        awaiting approval first."""
        try:
            found = await conversations.list(user_id, reviewing=reviewing)
        except ConversationRefused as refusal:
            raise ApiError(502, refusal.error_type or "Refused", refusal.message) from None
        return {
            "conversations": [
                {**c.model_dump(mode="json"), "temporal_ui_url": workflow_link(c.session_id)}
                for c in found
                if status is None or c.status == status
            ]
        }

    @app.get("/v1/conversations/{session_id}", tags=["conversations"])
    async def get_conversation(
        session_id: str = Depends(session),
        user_id: str = Depends(current_user),
        transcript_limit: int = Query(default=200, ge=0, le=1_000),
        audit_limit: int = Query(default=200, ge=0, le=1_000),
    ) -> dict[str, Any]:
        """Status, pending calls, the latest messages and the audit log (who decided
        what, when, with which args)."""
        query = StateQuery(
            user_id=user_id, transcript_limit=transcript_limit, audit_limit=audit_limit
        )
        snapshot = await guarded(session_id, conversations.state(session_id, user_id, query))
        return {**snapshot.model_dump(mode="json"), "temporal_ui_url": workflow_link(session_id)}

    @app.post(
        "/v1/conversations/{session_id}/messages",
        tags=["conversations"],
        response_model=TurnResult,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def post_message(
        body: MessageBody,
        request: Request,
        session_id: str = Depends(session),
        user_id: str = Depends(current_user),
    ) -> Any:
        """Send a message (starting the conversation if it is new). Answers the turn's
        result, or with ``Accept: text/event-stream`` the turn's AG-UI events."""
        message_id = body.message_id or uuid.uuid4().hex[:16]

        def call() -> Awaitable[TurnResult]:
            return conversations.send(
                session_id, user_id, body.text, message_id=message_id, reviewers=body.reviewers
            )

        return await respond_to_turn(request, session_id, user_id, call)

    @app.post(
        "/v1/conversations/{session_id}/decisions",
        tags=["conversations"],
        response_model=TurnResult,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def post_decisions(
        body: DecisionsBody,
        request: Request,
        session_id: str = Depends(session),
        user_id: str = Depends(current_user),
    ) -> Any:
        """Decide every pending call at once (approve, edit, reject, respond). The
        decider recorded in the audit log is the token's user."""

        def call() -> Awaitable[TurnResult]:
            return conversations.decide(session_id, user_id, body.decisions)

        return await respond_to_turn(request, session_id, user_id, call)

    @app.get(
        "/v1/conversations/{session_id}/events",
        tags=["conversations"],
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def follow_events(
        session_id: str = Depends(session),
        user_id: str = Depends(current_user),
        after: int = Query(default=-1, ge=-1, description="Send events after this offset."),
        last_event_id: str | None = Header(default=None),
    ) -> StreamingResponse:
        """The conversation's AG-UI events as Server-Sent Events, from ``after`` (or the
        ``Last-Event-ID`` a reconnecting client sends), following new ones."""
        if last_event_id is not None:
            try:
                after = max(int(last_event_id), -1)
            except ValueError:
                raise ApiError(
                    422, "InvalidRequest", "Last-Event-ID must be an event offset (an integer)"
                ) from None
        # Refused now (404, 422), not after the stream has begun.
        await guarded(session_id, conversations.events(session_id, user_id, limit=1))
        return sse(follow(session_id, user_id, after))

    @app.post(
        "/agui",
        tags=["ag-ui"],
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def agui(request: Request, user_id: str = Depends(current_user)) -> StreamingResponse:
        """AG-UI: a ``RunAgentInput`` whose ``threadId`` is the session id. With
        ``resume``, its entries answer the pending calls (payload: a decision, or
        ``true``/``false``); otherwise the last message, a user message, is sent. New
        input while calls wait for a decision ends the run with ``RUN_ERROR``."""
        try:
            run = RunAgentInput.model_validate(await request.json())
        except ValueError as err:
            raise ApiError(422, "InvalidRequest", f"not a RunAgentInput: {err}") from None
        session_id = session(run.thread_id)
        if run.resume:
            decisions = decisions_from_resume(run.resume)

            def call() -> Awaitable[TurnResult]:
                return conversations.decide(session_id, user_id, decisions)
        else:
            text, message_id = last_user_message(run)

            def call() -> Awaitable[TurnResult]:
                return conversations.send(session_id, user_id, text, message_id=message_id)

        return sse(turn_events(session_id, user_id, call, run_id=run.run_id))

    # --- turns and streams -------------------------------------------------------------

    async def respond_to_turn(
        request: Request,
        session_id: str,
        user_id: str,
        call: Callable[[], Awaitable[TurnResult]],
    ) -> Any:
        if "text/event-stream" in request.headers.get("accept", ""):
            return sse(turn_events(session_id, user_id, call))
        result = await guarded(session_id, call())
        return JSONResponse(result.model_dump(mode="json"))

    async def current_offset(session_id: str, user_id: str) -> int:
        """The latest event offset; -1 for a conversation that does not exist yet."""
        try:
            page = await conversations.events(session_id, user_id, limit=1)
        except ConversationRefused as refusal:
            if refusal.error_type == ErrorType.NOT_FOUND:
                return -1
            raise refused(refusal, session_id) from None
        return page.latest

    async def read_after(session_id: str, user_id: str, after: int) -> list[OffsetEvent]:
        try:
            return (await conversations.events(session_id, user_id, after=after)).events
        except ConversationRefused as refusal:
            if refusal.error_type == ErrorType.NOT_FOUND:
                return []
            raise

    async def turn_events(
        session_id: str,
        user_id: str,
        call: Callable[[], Awaitable[TurnResult]],
        run_id: str | None = None,
    ) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
        """The events of the turn ``call`` runs, as they happen; a refusal ends the
        stream with ``RUN_ERROR``. With ``run_id`` (AG-UI), runs carry the caller's id."""
        cursor = await current_offset(session_id, user_id)
        turn = asyncio.ensure_future(call())
        try:
            async with feeds.follow(session_id, user_id, cursor) as feed:
                while True:
                    finished = turn.done()
                    for item in await read_after(session_id, user_id, cursor):
                        cursor = item.offset
                        yield item.offset, with_run_id(item.event, run_id)
                    if finished:
                        break
                    waiting = asyncio.ensure_future(feed.wait_beyond(cursor, KEEPALIVE_SECONDS))
                    await asyncio.wait({turn, waiting}, return_when=asyncio.FIRST_COMPLETED)
                    waiting.cancel()
            turn.result()
        except ConversationRefused as refusal:
            if run_id is not None:
                yield (
                    None,
                    RunStartedEvent(thread_id=session_id, run_id=run_id).model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    ),
                )
            error = refused(refusal, session_id)
            yield (
                None,
                RunErrorEvent(message=error.message, code=error.error_type).model_dump(
                    mode="json", by_alias=True, exclude_none=True
                ),
            )
        finally:
            if not turn.done():
                turn.cancel()

    async def follow(
        session_id: str, user_id: str, after: int
    ) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
        """Every event after ``after``, then new ones as they come, until the
        conversation's workflow closes. ``None`` items are keepalives."""
        cursor = after
        async with feeds.follow(session_id, user_id, cursor) as feed:
            while True:
                try:
                    page = await read_after(session_id, user_id, cursor)
                except ConversationRefused:
                    return
                for item in page:
                    cursor = item.offset
                    yield item.offset, item.event
                if feed.closed and not page:
                    return
                if not await feed.wait_beyond(cursor, KEEPALIVE_SECONDS):
                    yield None, {}

    def sse(events: AsyncIterator[tuple[int | None, dict[str, Any]]]) -> StreamingResponse:
        encoder = EventEncoder()

        async def body() -> AsyncIterator[str]:
            async for offset, event in events:
                if not event:
                    yield ": keepalive\n\n"
                    continue
                encoded = encoder.encode(AG_UI_EVENT.validate_python(event))
                yield (f"id: {offset}\n" if offset is not None else "") + encoded

        return StreamingResponse(
            body(),
            media_type=encoder.get_content_type(),
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return app


def with_run_id(event: dict[str, Any], run_id: str | None) -> dict[str, Any]:
    """An AG-UI client names its run: give RUN_STARTED/RUN_FINISHED its id."""
    if run_id is not None and event.get("type") in ("RUN_STARTED", "RUN_FINISHED"):
        return {**event, "runId": run_id}
    return event


def decisions_from_resume(entries: list[ResumeEntry]) -> list[Decision]:
    """AG-UI resume entries as decisions: ``cancelled`` rejects; a ``resolved`` payload
    is a decision (``{"action": ...}``, see the interrupt's ``responseSchema``), or
    ``true`` (approve) / ``false`` (reject)."""
    decisions = []
    for entry in entries:
        payload = entry.payload
        try:
            if entry.status == "cancelled" or payload is False:
                decision = Decision(
                    tool_call_id=entry.interrupt_id, action="reject", message="cancelled"
                )
            elif payload is True or payload is None:
                decision = Decision(tool_call_id=entry.interrupt_id, action="approve")
            elif isinstance(payload, dict):
                decision = Decision.model_validate({**payload, "tool_call_id": entry.interrupt_id})
            else:
                raise ValueError(
                    "the payload must be a decision object, true (approve) or false (reject)"
                )
        except (ValueError, ValidationError) as err:
            raise ApiError(
                422, ErrorType.INVALID_DECISION, f"resume entry {entry.interrupt_id}: {err}"
            ) from None
        decisions.append(decision)
    return decisions


def last_user_message(run: RunAgentInput) -> tuple[str, str | None]:
    """The text and id of the run's new input: its last message, which must be the
    user's. (AG-UI clients send the whole thread; only its last message is new.)"""
    if not run.messages:
        raise ApiError(422, ErrorType.INVALID_MESSAGE, "the run has no messages and no resume")
    last = run.messages[-1]
    role = getattr(last, "role", "")
    if role != "user":
        raise ApiError(
            422,
            ErrorType.INVALID_MESSAGE,
            f"the last message is a {role or 'non-user'} message; send the user's message "
            "last, or answer the interrupts with resume",
        )
    content = last.content
    if isinstance(content, str):
        text = content
    else:
        text = "".join(getattr(part, "text", "") or "" for part in content)
    message_id = last.id if last.id and MESSAGE_ID.fullmatch(last.id) else None
    return text, message_id
