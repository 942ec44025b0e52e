"""``POST /agui``: the AG-UI protocol's ``RunAgentInput`` in, the run's AG-UI events out
(Server-Sent Events). Client side (the gateway).

The ``threadId`` is the session id. With ``resume``, its entries answer the pending
calls (each interrupt is one call); otherwise the last message, a user message, is
sent as the conversation's next message. A run with neither is a client reconnecting
(``reconnect``): it gets the thread's messages and open interrupts, and nothing runs.
A run whose ``forwardedProps.parley`` asks for a revert or an undo does that instead,
and each tool result says whether its call may be reverted (``agui_reverts``).

The client's ``runId`` names the run in the conversation's event log too (refused, 422,
if another run of the conversation had it), and its ``context`` and ``state`` are shown
to the model during that run (``ClientContext``), never stored in the transcript.

Resumes are read strictly: an entry's or a payload's unknown key is refused (``mesage``
would lose a reason; ``args`` on an approve would look like an edit that never
happens), with 422 ``InvalidDecision`` and one line that names the entry, before
anything is decided.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable
from typing import Any

from ag_ui.core import ResumeEntry, RunAgentInput
from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from parley.client import ConversationRefused
from parley.client.reverts import revert
from parley.contracts import (
    ClientContext,
    ClientRun,
    ClientTool,
    ClientToolResult,
    Decision,
    StateQuery,
    TurnResult,
)
from parley.contracts.errors import ErrorType
from parley.gateway.agui_reverts import RevertMarks, call_request, undo_run
from parley.gateway.deps import Gateway, current_groups, current_user, gateway, session
from parley.gateway.errors import ApiError, describe, refused
from parley.gateway.reconnect import reconnect_events
from parley.gateway.rest import MESSAGE_ID, StrictDecision
from parley.gateway.schemas import ERROR_RESPONSES, RUN_AGENT_INPUT_BODY, sse_reply
from parley.gateway.streams import StreamItem, StreamItems, sse, turn_stream

router = APIRouter(responses=ERROR_RESPONSES)


@router.post(
    "/agui",
    tags=["ag-ui"],
    response_class=StreamingResponse,
    responses=sse_reply("The run's events"),
    openapi_extra=RUN_AGENT_INPUT_BODY,
)
async def agui(
    request: Request,
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> StreamingResponse:
    """AG-UI: a ``RunAgentInput`` whose ``threadId`` is the session id. With
    ``resume``, its entries answer the pending calls (payload: a decision, or
    ``true``/``false``); otherwise the last message, a user message, is sent. A
    refused run answers its error before any stream: 409 for new input while calls
    wait for a decision, 422 ``InvalidDecision`` for an invalid resume (nothing is
    decided). With ``forwardedProps: {"parley": {"revert": CALL_ID}}`` the run proposes
    the inverse of a call that ran (mostly ending in its interrupt); with ``{"parley":
    {"undo": CALL_ID or [...]}}`` it takes back calls in their undo window (its
    ``RUN_FINISHED`` result: ``{"undone": [...]}``). Each ``TOOL_CALL_RESULT`` says in
    ``metadata.parley.revertible`` whether a revert of its call would be taken (the
    conversation's ``revertible``), as does each tool message of a reconnect's
    ``MESSAGES_SNAPSHOT``. A retried request
    replays the run that answered it. An OpenID Connect
    token's groups count its user in as a reviewer ``group:<name>`` (reading, deciding)."""
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(422, ErrorType.INVALID_REQUEST, "the body is not JSON") from None
    try:
        run = RunAgentInput.model_validate(body)
    except ValidationError as err:
        raise ApiError(
            422, ErrorType.INVALID_REQUEST, f"not a RunAgentInput: {describe(err.errors())}"
        ) from None
    session_id = session(run.thread_id)
    asked = call_request(run)
    if asked is None and not run.resume and not run.messages:
        return sse(_items(await reconnect_events(gw, session_id, user_id, run.run_id, groups)))
    client_run = ClientRun(
        run_id=run.run_id, context=client_context(run), client_tools=client_tools(run)
    )
    if asked is not None and asked.undo is not None:
        return await undo_run(gw, session_id, user_id, run, asked.undo, groups)
    if asked is not None and asked.revert is not None:
        call_id = asked.revert

        def call() -> Awaitable[TurnResult]:
            return revert(gw.conversations, session_id, user_id, call_id, groups)
    elif run.resume:
        decisions = decisions_from_resume(body["resume"])
        await _answers_every_interrupt(gw, session_id, user_id, decisions, groups)

        def call() -> Awaitable[TurnResult]:
            return gw.conversations.decide(
                session_id, user_id, decisions, run=client_run, groups=groups
            )
    elif results := tool_results(run):
        # The front end answers calls of its own tools: no text, an id made of the calls'.
        client_run["tool_results"] = results
        digest = hashlib.sha256(" ".join(r.tool_call_id for r in results).encode()).hexdigest()

        def call() -> Awaitable[TurnResult]:
            return gw.conversations.send(
                session_id, user_id, "", message_id=f"results-{digest[:24]}", run=client_run
            )
    else:
        text, message_id = last_user_message(run)

        def call() -> Awaitable[TurnResult]:
            return gw.conversations.send(
                session_id, user_id, text, message_id=message_id, run=client_run
            )

    marks = RevertMarks(gw, session_id, user_id, groups)
    return await turn_stream(
        gw, session_id, user_id, call, run_id=run.run_id, groups=groups, mark=marks.marked
    )


async def _items(items: list[StreamItem]) -> StreamItems:
    for item in items:
        yield item


#: How the run's ``state`` is described to the model, beside its ``context`` entries.
STATE_DESCRIPTION = "the application's state (AG-UI state), as JSON"


def client_tools(run: RunAgentInput) -> list[ClientTool]:
    """The front end's own tools (CopilotKit's frontend actions), offered to the model
    for this run: a call of one ends the run with it, and the client answers it."""
    tools = []
    for index, tool in enumerate(run.tools or []):
        try:
            tools.append(
                ClientTool(
                    name=tool.name,
                    description=tool.description or "",
                    parameters={} if tool.parameters is None else tool.parameters,
                )
            )
        except ValidationError as err:  # AG-UI leaves ``parameters`` untyped
            raise ApiError(
                422,
                ErrorType.INVALID_REQUEST,
                f"tools[{index}]: {describe(err.errors())}; a tool's "
                'parameters are a JSON Schema object, such as {"type": "object"}',
            ) from None
    return tools


def tool_results(run: RunAgentInput) -> list[ClientToolResult]:
    """The run's trailing tool messages: the front end's results for its tools' calls."""
    results: list[ClientToolResult] = []
    for message in reversed(run.messages or []):
        if getattr(message, "role", "") != "tool":
            break
        content = (
            message.content
            if isinstance(message.content, str)
            else json.dumps(message.content, ensure_ascii=False)
        )
        results.insert(0, ClientToolResult(tool_call_id=message.tool_call_id, content=content))
    return results


def client_context(run: RunAgentInput) -> list[ClientContext]:
    """What the model is shown of the front end for this run: each ``context`` entry,
    and the ``state`` when there is one (``{}``, ``null`` and ``[]`` are none)."""
    context = [ClientContext(description=c.description, value=c.value) for c in run.context or []]
    if run.state not in (None, {}, []):
        value = json.dumps(run.state, ensure_ascii=False, sort_keys=True)
        context.append(ClientContext(description=STATE_DESCRIPTION, value=value))
    return context


#: The keys of a resume entry, as AG-UI spells them (camelCase) or as Python does.
RESUME_KEYS = frozenset(
    {name for name in ResumeEntry.model_fields}
    | {field.alias for field in ResumeEntry.model_fields.values() if field.alias}
)
#: The keys of a decision payload: a ``Decision`` but its call id (the interrupt's id).
DECISION_KEYS = frozenset(Decision.model_fields) - {"tool_call_id"}


def decisions_from_resume(entries: list[dict[str, Any]]) -> list[Decision]:
    """AG-UI resume entries (as sent; ``RunAgentInput`` has checked their types) as
    decisions: ``cancelled`` rejects; a ``resolved`` payload is a decision
    (``{"action": ...}``, see the interrupt's ``responseSchema``), or ``true``
    (approve) / ``false`` (reject). A key neither knows is refused, never ignored."""
    decisions = []
    for index, raw in enumerate(entries):
        entry = ResumeEntry.model_validate(raw)
        where = f"resume[{index}] (interrupt {entry.interrupt_id})"
        unknown = sorted(set(raw) - RESUME_KEYS)
        if unknown:
            raise _invalid(f"{where}: unknown key {', '.join(unknown)}")
        payload = entry.payload
        if entry.status == "cancelled" or payload is False:
            decision = Decision(
                tool_call_id=entry.interrupt_id, action="reject", message="cancelled"
            )
        elif payload is True or payload is None:
            decision = Decision(tool_call_id=entry.interrupt_id, action="approve")
        elif isinstance(payload, dict):
            unknown = sorted(set(payload) - DECISION_KEYS)
            if unknown:
                raise _invalid(
                    f"{where}: unknown key {', '.join(unknown)} in the payload; a decision "
                    f"has {', '.join(sorted(DECISION_KEYS))}"
                )
            try:
                decision = StrictDecision.model_validate(
                    {**payload, "tool_call_id": entry.interrupt_id}
                )
            except ValidationError as err:
                raise _invalid(f"{where}: {describe(err.errors())}") from None
        else:
            raise _invalid(
                f"{where}: the payload must be a decision object, true (approve) or false (reject)"
            )
        decisions.append(Decision.model_validate(decision.model_dump()))
    return decisions


async def _answers_every_interrupt(
    gw: Gateway,
    session_id: str,
    user_id: str,
    decisions: list[Decision],
    groups: tuple[str, ...] = (),
) -> None:
    """AG-UI's rule: one resume answers every open interrupt (elsewhere a decision may
    name some of the pending calls and leave the others waiting). Read as the decider,
    with their verified ``groups``."""
    query = StateQuery(user_id=user_id, transcript_limit=0, audit_limit=0, groups=[*groups])
    try:
        snapshot = await gw.conversations.state(session_id, user_id, query)
    except ConversationRefused as refusal:  # a stranger's 404, no worker...: before any stream
        raise refused(refusal, session_id) from None
    answered = {d.tool_call_id for d in decisions}
    missing = [p.tool_call_id for p in snapshot.pending if p.tool_call_id not in answered]
    if missing:
        raise _invalid(
            f"a resume answers every open interrupt; none of its entries answers "
            f"{', '.join(missing)}"
        )


def _invalid(message: str) -> ApiError:
    return ApiError(422, ErrorType.INVALID_DECISION, message)


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
