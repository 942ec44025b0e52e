"""The HTTP layer against a real local server: every failure structured and mapped."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from parley.activities.http import (
    HttpStatusError,
    HttpTransportError,
    JsonApiClient,
    aclose_shared_client,
    parse_retry_after,
    shared_client,
    to_tool_error,
)
from parley.contracts.errors import ParleyError, ToolInputError, ToolPermissionError, TransientError
from parley.services.plans import BackgroundServer

API_KEY = "sk-test-very-secret-key"

# path -> (status, JSON body or raw text, extra headers)
ANSWERS: dict[str, tuple[int, object, dict[str, str]]] = {
    "422": (422, {"code": "22023", "message": "due_date is not an ISO date",
                  "details": None, "hint": "use YYYY-MM-DD"}, {}),
    "400": (400, {"detail": "bad filter"}, {}),
    "401": (401, {"code": "PGRST301", "message": "JWT invalid", "details": None,
                  "hint": None}, {}),
    "403": (403, {"message": "plans are read-only for this user"}, {}),
    "404": (404, {"message": "plan 7 not found"}, {}),
    "409": (409, {"message": "duplicate key"}, {}),
    "429": (429, {"message": "slow down"}, {"Retry-After": "7"}),
    "503": (503, {"message": "maintenance"}, {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"}),
    "500-html": (500, "<html><body>Internal Server Error</body></html>", {}),
    "418": (418, {"message": "teapot"}, {}),
}  # fmt: skip


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/ok")
    async def ok(request: Request) -> dict[str, object]:
        return {"user": request.headers.get("x-parley-user"),
                "auth": request.headers.get("authorization"),
                "key": request.headers.get("idempotency-key")}  # fmt: skip

    @app.get("/empty")
    async def empty() -> Response:
        return Response(status_code=204)

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(1)
        return {"late": "yes"}

    @app.api_route("/answer/{name}", methods=["GET", "POST"])
    async def answer(name: str) -> Response:
        status, body, headers = ANSWERS[name]
        if isinstance(body, str):
            return Response(body, status_code=status, headers=headers, media_type="text/html")
        return JSONResponse(body, status_code=status, headers=headers)

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer(_app()) as running:
        yield running


@pytest.fixture
async def api(server: BackgroundServer) -> AsyncIterator[JsonApiClient]:
    async with httpx.AsyncClient() as client:
        yield JsonApiClient(
            server.url, api_key=API_KEY, client=client, service_name="the plans service"
        )


async def _fail(api: JsonApiClient, name: str, method: str = "GET") -> ParleyError:
    with pytest.raises(ParleyError) as caught:
        await api.request(method, f"/answer/{name}", user_id="alice")
    error = caught.value
    assert API_KEY not in str(error) and API_KEY not in repr(error.body)
    assert isinstance(error.__cause__, HttpStatusError)
    return error


async def test_success_returns_parsed_json_and_sends_user_and_key(api: JsonApiClient) -> None:
    body = await api.request("GET", "/ok", user_id="alice", idempotency_key="wf:call-1")
    assert body == {"user": "alice", "auth": f"Bearer {API_KEY}", "key": "wf:call-1"}
    assert await api.request("GET", "/empty", user_id="alice") is None


@pytest.mark.parametrize("user", ["", "  ", "default", "DEFAULT"])
async def test_a_missing_or_default_user_is_a_programming_error(
    api: JsonApiClient, user: str
) -> None:
    with pytest.raises(ValueError):
        await api.request("GET", "/ok", user_id=user)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("422", "due_date is not an ISO date Hint: use YYYY-MM-DD"),
        ("400", "bad filter"),
        ("404", "plan 7 not found"),
        ("409", "duplicate key"),
    ],
)
async def test_input_errors_carry_the_backend_message(
    api: JsonApiClient, name: str, message: str
) -> None:
    error = await _fail(api, name, "POST")
    assert type(error) is ToolInputError
    assert error.message == message
    assert error.http_status == int(name)
    assert error.body == ANSWERS[name][1]
    cause = error.__cause__
    assert isinstance(cause, HttpStatusError)
    assert cause.method == "POST" and cause.url == f"{api.base_url}/answer/{name}"
    assert cause.status_code == int(name) and cause.body == ANSWERS[name][1]


async def test_401_says_the_credentials_were_refused_without_printing_them(
    api: JsonApiClient,
) -> None:
    error = await _fail(api, "401")
    assert type(error) is ToolPermissionError
    assert error.message == "the plans service refused the worker's credentials (HTTP 401)"
    assert error.http_status == 401
    assert error.body["code"] == "PGRST301"


async def test_403_is_a_neutral_permission_error(api: JsonApiClient) -> None:
    error = await _fail(api, "403")
    assert type(error) is ToolPermissionError
    assert error.http_status == 403
    assert "plans are read-only for this user" in error.message


async def test_429_is_transient_with_retry_after_seconds(api: JsonApiClient) -> None:
    error = await _fail(api, "429")
    assert type(error) is TransientError
    assert error.http_status == 429
    assert error.retry_after == 7.0
    assert error.body == {"message": "slow down"}


async def test_503_is_transient_with_retry_after_http_date(api: JsonApiClient) -> None:
    error = await _fail(api, "503")
    assert type(error) is TransientError
    assert error.http_status == 503
    assert error.retry_after is not None and error.retry_after > 3600


async def test_an_unparseable_body_is_kept_as_text(api: JsonApiClient) -> None:
    error = await _fail(api, "500-html")
    assert type(error) is TransientError
    assert error.http_status == 500
    assert error.body == "<html><body>Internal Server Error</body></html>"
    assert error.retry_after is None


async def test_an_unmapped_status_fails_closed_but_structured(api: JsonApiClient) -> None:
    error = await _fail(api, "418")
    assert type(error) is ParleyError
    assert error.http_status == 418 and error.body == {"message": "teapot"}


async def test_a_refused_connection_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx.AsyncClient() as client:
        api = JsonApiClient(f"http://127.0.0.1:{port}", api_key=API_KEY, client=client)
        with pytest.raises(TransientError) as caught:
            await api.request("GET", "/plans", user_id="alice")
    error = caught.value
    assert error.http_status is None and error.retry_after is None
    cause = error.__cause__
    assert isinstance(cause, HttpTransportError)
    assert cause.kind == "connect" and cause.method == "GET"
    assert cause.url == f"http://127.0.0.1:{port}/plans"
    assert API_KEY not in str(error)


async def test_a_timeout_is_transient(server: BackgroundServer) -> None:
    async with httpx.AsyncClient() as client:
        api = JsonApiClient(server.url, api_key=API_KEY, client=client, timeout=0.2)
        with pytest.raises(TransientError) as caught:
            await api.request("GET", "/slow", user_id="alice")
    assert isinstance(caught.value.__cause__, HttpTransportError)
    assert caught.value.__cause__.kind == "timeout"


async def test_the_shared_client_is_used_by_default(server: BackgroundServer) -> None:
    api = JsonApiClient(server.url, api_key=API_KEY)
    assert (await api.request("GET", "/ok", user_id="bob"))["user"] == "bob"
    assert shared_client() is shared_client()
    await aclose_shared_client()


def test_to_tool_error_table() -> None:
    def status(code: int, **kw: object) -> ParleyError:
        return to_tool_error(HttpStatusError("GET", "http://x/y", code, {"message": "m"}, **kw))

    for code in (400, 404, 409, 422):
        assert type(status(code)) is ToolInputError
    for code in (401, 403):
        assert type(status(code)) is ToolPermissionError
    for code in (408, 429, 500, 502, 503, 504):
        error = status(code, retry_after=1.5)
        assert type(error) is TransientError and error.retry_after == 1.5
    transport = to_tool_error(HttpTransportError("GET", "http://x/y", "boom", kind="tls"))
    assert type(transport) is TransientError
    assert "tls" in transport.message


def test_parse_retry_after() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert parse_retry_after("120", now=now) == 120.0
    assert parse_retry_after("Tue, 01 Jan 2030 00:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Mon, 31 Dec 2029 00:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after(None) is None
