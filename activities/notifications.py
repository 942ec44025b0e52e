"""The ``notify`` activity: tell a webhook that a conversation waits for a decision.
Activity side (network I/O through the worker's httpx client, given by its entry point).

Configured on the worker: ``PARLEY_NOTIFY_URL`` (the webhook) and ``PARLEY_GATEWAY_URL``
(where the approval page is, for the link). The workflow runs ``notify`` only when the
worker's catalogue says it has a webhook, in the background of the turn, retried by
Temporal (``NOTIFY_ACTIVITY``). The webhook gets one JSON POST::

    {"event": "awaiting_decision", "session_id": ..., "user_id": ...,
     "pending": [{"tool_call_id", "name", "args", "description", "expires_at",
                  "preview", ...}],
     "text": "<one line per call, with its preview's summary>",
     "url": "<gateway>/#c=<session_id>", "run_id": "run-N",
     "links": [{"tool_call_id", "user_id", "approve", "reject", "expires_at"}],
     "awaiting": {"<tool_call_id>": ["<who may approve it>"]}}

Each call is its whole ``PendingCall`` as JSON: ``preview`` is its ``ToolPreview`` (what
it would change; bounded like a result, None for a tool without one). ``text`` is for a
receiver that posts it on as it is (a chat's incoming webhook reads ``text``): a line
per call, its preview cut to ``ToolPreview.summary()``, and its judge's verdict
(``JudgeVerdict.label()``) when its rule has a judge.

``links`` (with ``PARLEY_LINK_SECRET``): signed one-time links (``parley.contracts.links``) that
approve or reject one call as one person (the owner, each reviewer, or the person an
escalation goes to), for buttons in channels that carry no bearer token. An approve link
goes only to those whose approve would be taken (``awaiting``: never the requester of a
call a reviewer rule holds, never a quorum's reviewer twice); everyone gets a reject link.
A reviewer group (``group:ops``) gets no link: a link decides as one user, and a group is
none (its members sign in to the page); ``awaiting`` still names it among the approvers.

with an ``Idempotency-Key`` header (``<workflow id>:<run_id>``, the same on every retry),
so a receiver that saw the first attempt can drop the next. Failures follow the HTTP
error table (``parley.activities.http``): 408/429/5xx and network errors are retried,
other answers are not.
"""

from __future__ import annotations

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from parley.activities.http import (
    IDEMPOTENCY_HEADER,
    HttpError,
    HttpStatusError,
    HttpTransportError,
    body_message,
    shared_client,
)
from parley.activities.redaction import redact
from parley.contracts import NOTIFY, NotifyInput, workflow_id_for
from parley.contracts.errors import ErrorType, is_transient_status
from parley.contracts.links import ApprovalLink
from parley.contracts.reviewers import GROUP_PREFIX


class NotifyActivities:
    def __init__(
        self,
        webhook_url: str,
        page_url: str,
        *,
        timeout: float = 10.0,
        http_client: httpx.AsyncClient | None = None,
        link_secret: str | None = None,
    ) -> None:
        """``http_client``: the worker's, which its entry point opens and closes;
        ``link_secret``: with it, the webhook gets signed approval links."""
        self._http_client = http_client
        self._link_secret = link_secret
        self._webhook_url = webhook_url
        self._page_url = page_url.rstrip("/")
        self._timeout = timeout

    @activity.defn(name=NOTIFY)
    async def notify(self, request: NotifyInput) -> None:
        body = {
            "event": "escalated" if request.escalated_to else "awaiting_decision",
            "session_id": request.session_id,
            "user_id": request.user_id,
            "pending": [call.model_dump(mode="json") for call in request.pending],
            "text": notice_text(request),
            "url": f"{self._page_url}/#c={request.session_id}",
            "run_id": request.run_id,
        }
        if request.escalated_to:
            body["escalated_to"] = request.escalated_to
        if request.approvers:
            body["awaiting"] = request.approvers
        if self._link_secret:
            body["links"] = self._links(request, self._link_secret)
        key = f"{workflow_id_for(request.session_id)}:{request.run_id}"
        try:
            response = await (self._http_client or shared_client()).post(
                self._webhook_url,
                json=body,
                headers={IDEMPOTENCY_HEADER: key},
                timeout=self._timeout,
            )
        except httpx.TransportError as err:
            raise _failure(HttpTransportError.from_httpx("POST", self._webhook_url, err)) from None
        if not response.is_success:
            raise _failure(HttpStatusError.from_response(response)) from None

    def _links(self, request: NotifyInput, secret: str) -> list[dict[str, str]]:
        """One reject link per call and per person who may decide it (the owner and the
        reviewers; on an escalation, the person it goes to), and an approve link for
        those of them whose approve the gate would take (``NotifyInput.approvers``). A
        reviewer group is no one person: none for ``group:<name>``."""
        people = [request.user_id, *request.reviewers]
        if request.escalated_to:
            people = [request.escalated_to]
        people = [person for person in people if not person.startswith(GROUP_PREFIX)]
        links = []
        for call in request.pending:
            for person in people:
                entry = {"tool_call_id": call.tool_call_id, "user_id": person}
                may_approve = person in request.approvers.get(call.tool_call_id, [person])
                for action in ("approve", "reject") if may_approve else ("reject",):
                    link = ApprovalLink(
                        session_id=request.session_id,
                        tool_call_id=call.tool_call_id,
                        args_hash=call.args_hash,
                        user_id=person,
                        action=action,
                        expires=int(call.expires_at.timestamp()),
                    )
                    entry[action] = f"{self._page_url}/links/{link.sign(secret)}"
                entry["expires_at"] = call.expires_at.isoformat()
                links.append(entry)
        return links


def notice_text(request: NotifyInput) -> str:
    """A line per call: who it waits for, what it is and, when it has one, its preview's
    summary (``ToolPreview.summary``: one line, bounded)."""
    who = request.escalated_to or request.user_id
    lines = []
    for call in request.pending:
        line = f"{call.name} ({call.tool_call_id}) in {request.session_id} waits for {who}"
        line += f": {call.description}" if call.description else ""
        if call.preview is not None:
            line += f" Preview: {call.preview.summary()}"
        if call.judged is not None:  # its rule's judge: "(escalated by judge: ...)"
            line += f" ({call.judged.label()})"
        lines.append(line)
    return "\n".join(lines)


def _failure(failure: HttpError) -> ApplicationError:
    """Transient failures are retried by Temporal; any other answer is final. The
    message names the webhook and the status, never its URL (webhook URLs often carry
    a token in their path), and is redacted like every activity failure."""
    if isinstance(failure, HttpStatusError):
        said = body_message(failure.body)
        message = f"the notification webhook answered HTTP {failure.status_code}"
        message += f": {said}" if said else ""
        transient = is_transient_status(failure.status_code)
    else:
        kind = failure.kind if isinstance(failure, HttpTransportError) else "network"
        message = f"could not reach the notification webhook ({kind})"
        transient = True
    return ApplicationError(
        redact(message), type=ErrorType.NOTIFICATION_FAILED, non_retryable=not transient
    )
