"""The HTTP layer under Parley's REST toolsets: structured failures, one error mapping.

Activity side: used by tools while ``run_tool`` executes them; never imported by
workflow code (it does network I/O through httpx).

Every failure is an exception with its facts attached; nothing returns ``None`` for a
failure (design.md, F6)::

    HttpError                        an HTTP exchange that did not succeed
     ├── HttpStatusError             the server answered non-2xx: method, url,
     │                               status_code, body (parsed JSON, else text), retry_after
     └── HttpTransportError          no answer: connect refused, timeout, TLS, broken
                                     connection: method, url, kind, reason

``to_tool_error`` is the one mapping from those to ``parley.contracts.errors`` (design.md's table):

    400 404 409 422          -> ToolInputError       the backend's message, for the model
    401                      -> ToolPermissionError  "the <service> refused the worker's
                                                     credentials (HTTP 401)": no key printed
    403                      -> ToolPermissionError  neutral
    408 425 429 5xx,         -> TransientError       retried by Temporal; Retry-After kept
    transport
    anything else            -> ParleyError          status and body kept; fails closed

``JsonApiClient`` sends JSON requests for one user (``X-Parley-User``) with a bearer
API key, returns the parsed body of a 2xx answer and raises the mapped ``ParleyError``
otherwise (its ``__cause__`` is the ``HttpError``).
"""

from __future__ import annotations

import asyncio
import weakref
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from parley.contracts import check_user_id
from parley.contracts.errors import (
    INPUT_STATUSES,
    ParleyError,
    ToolInputError,
    ToolPermissionError,
    TransientError,
    is_transient_status,
)

USER_HEADER = "X-Parley-User"
IDEMPOTENCY_HEADER = "Idempotency-Key"


#: An unparseable error body is kept as text, up to this many characters.
MAX_TEXT_BODY = 2000


class HttpError(Exception):
    """An HTTP exchange that did not succeed."""

    def __init__(self, message: str, *, method: str, url: str) -> None:
        super().__init__(message)
        self.method = method
        self.url = url


class HttpStatusError(HttpError):
    """The server answered with a non-2xx status."""

    def __init__(
        self,
        method: str,
        url: str,
        status_code: int,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{method} {url} -> HTTP {status_code}", method=method, url=url)
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, response: httpx.Response) -> HttpStatusError:
        request = response.request
        return cls(
            request.method,
            str(request.url),
            response.status_code,
            parse_body(response),
            parse_retry_after(response.headers.get("Retry-After")),
        )


class HttpTransportError(HttpError):
    """No HTTP answer at all. ``kind`` is ``connect``, ``timeout``, ``tls`` or ``network``."""

    def __init__(self, method: str, url: str, reason: str, *, kind: str = "network") -> None:
        super().__init__(f"{method} {url} failed ({kind}): {reason}", method=method, url=url)
        self.reason = reason
        self.kind = kind

    @classmethod
    def from_httpx(cls, method: str, url: str, err: httpx.TransportError) -> HttpTransportError:
        reason = str(err) or type(err).__name__
        if isinstance(err, httpx.TimeoutException):
            kind = "timeout"
        elif "ssl" in reason.lower() or "certificate" in reason.lower():
            kind = "tls"
        elif isinstance(err, httpx.ConnectError):
            kind = "connect"
        else:
            kind = "network"
        return cls(method, url, reason, kind=kind)


def parse_body(response: httpx.Response, *, limit: int | None = MAX_TEXT_BODY) -> Any:
    """The body as JSON if it parses, else its text (cut at ``limit``); ``None`` if empty."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        text = response.text
        return text if limit is None or len(text) <= limit else text[:limit] + "…"


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def body_message(body: Any) -> str | None:
    """The human message in an error body: PostgREST ``message`` (+ details, hint),
    FastAPI ``detail``, or ``error``; a short text body is its own message."""
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        if isinstance(message, list):  # FastAPI validation errors
            message = "; ".join(
                str(item.get("msg", item)) if isinstance(item, dict) else str(item)
                for item in message
            )
        if not message:
            return None
        text = str(message)
        details, hint = body.get("details"), body.get("hint")
        if isinstance(details, str) and details:
            text += f" ({details})"
        if isinstance(hint, str) and hint:
            text += f" Hint: {hint}"
        return text
    if isinstance(body, str) and body.strip() and len(body) <= 300:
        return body.strip()
    return None


def to_tool_error(exc: HttpError, *, service: str = "the service") -> ParleyError:
    """THE mapping from an HTTP failure to Parley's error table (see the module doc).

    ``service`` names the backend in messages, e.g. ``"the plans service"``.
    """
    if isinstance(exc, HttpTransportError):
        return TransientError(
            f"could not reach {service} ({exc.kind}): {exc.method} {exc.url}: {exc.reason}"
        )
    if not isinstance(exc, HttpStatusError):
        raise TypeError(f"not an HttpError: {exc!r}")
    status, body = exc.status_code, exc.body
    backend = body_message(body)
    if status in INPUT_STATUSES:
        return ToolInputError(
            backend or f"{service} rejected the request (HTTP {status})",
            http_status=status,
            body=body,
        )
    if status == 401:
        # Only the fact, never the key (nor the request headers that carried it).
        return ToolPermissionError(
            f"{service} refused the worker's credentials (HTTP 401)",
            http_status=status,
            body=body,
        )
    if status == 403:
        message = f"{service} does not allow this action (HTTP 403)"
        return ToolPermissionError(
            f"{message}: {backend}" if backend else message, http_status=status, body=body
        )
    if is_transient_status(status):
        suffix = f": {backend}" if backend else ""
        return TransientError(
            f"{service} is unavailable for now (HTTP {status}){suffix}",
            http_status=status,
            body=body,
            retry_after=exc.retry_after,
        )
    return ParleyError(
        f"{service} answered {exc.method} {exc.url} with unexpected HTTP {status}",
        http_status=status,
        body=body,
    )


# --- the worker's client --------------------------------------------------------------


def new_http_client() -> httpx.AsyncClient:
    """The one HTTP client a worker's toolsets and notifications share: its entry point
    (``parley.worker.wiring``) opens it, injects it and closes it when the worker stops."""
    return httpx.AsyncClient(follow_redirects=False)


# A fallback for a ``JsonApiClient`` built without a client (a toolset used outside a
# worker, as the tests do): one per event loop, as a pooled client must not be shared
# across loops. The worker itself never uses it.

_shared_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def shared_client() -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for this event loop, for callers given none."""
    loop = asyncio.get_running_loop()
    client = _shared_clients.get(loop)
    if client is None or client.is_closed:
        client = new_http_client()
        _shared_clients[loop] = client
    return client


async def aclose_shared_client() -> None:
    """Close this loop's shared client (on worker shutdown)."""
    client = _shared_clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


class JsonApiClient:
    """A JSON REST backend reached with a bearer API key, on behalf of one user per call.

    ``client``: the worker's ``httpx.AsyncClient`` (``new_http_client``); without one,
    the event loop's fallback (``shared_client``). The API key goes
    only into the ``Authorization`` header; it is never part of an error.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        client: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
        service_name: str = "the service",
    ) -> None:
        if not base_url.strip():
            raise ValueError("a base URL is required")
        self.base_url = base_url.strip().rstrip("/")
        self.service_name = service_name
        self.timeout = timeout
        self._api_key = api_key
        self._client = client

    def __repr__(self) -> str:  # no key in reprs, logs or tracebacks
        return f"JsonApiClient({self.base_url!r}, service_name={self.service_name!r})"

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    async def request(
        self,
        method: str,
        path: str,
        *,
        user_id: str,
        json: Any = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Send one request; the parsed JSON body of a 2xx answer (text if not JSON,
        ``None`` only for an empty success such as 204).

        Raises the mapped ``ParleyError`` for any failure, chained to the ``HttpError``;
        ``ValueError`` for a missing or ``default`` user id (a programming error).
        """
        user = check_user_id(user_id)
        method = method.upper()
        url = self.url(path)
        headers = {
            "Authorization": f"Bearer {self._api_key}",
            "Accept": "application/json",
            USER_HEADER: user,
        }
        if idempotency_key is not None:
            headers[IDEMPOTENCY_HEADER] = idempotency_key
        client = self._client or shared_client()
        try:
            response = await client.request(
                method, url, headers=headers, json=json, params=params, timeout=self.timeout
            )
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as err:
            raise ValueError(f"cannot send {method} {url}: {err}") from err
        except httpx.TransportError as err:
            http_error: HttpError = HttpTransportError.from_httpx(method, url, err)
            http_error.__cause__ = err
            raise to_tool_error(http_error, service=self.service_name) from http_error
        if response.is_success:
            return parse_body(response, limit=None)
        http_error = HttpStatusError.from_response(response)
        raise to_tool_error(http_error, service=self.service_name) from http_error
