"""The reference plans service over real HTTP: auth, users, idempotency, errors, hooks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from parley.services.plans import BackgroundServer, create_app
from tests.support.plans import PLANS_KEY

ERROR_KEYS = {"code", "message", "details", "hint"}


@pytest.fixture
def http(plans: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=plans.url, headers={"Authorization": f"Bearer {PLANS_KEY}"}) as c:
        yield c


def _as(user: str, key: str | None = None) -> dict[str, str]:
    headers = {"X-Parley-User": user}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def test_health_needs_no_auth(plans: BackgroundServer) -> None:
    assert httpx.get(f"{plans.url}/health").json() == {"status": "ok"}


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key", PLANS_KEY, "Basic abc"])
def test_requests_without_the_api_key_get_a_postgrest_401(
    plans: BackgroundServer, authorization: str | None
) -> None:
    headers = _as("alice")
    if authorization is not None:
        headers["Authorization"] = authorization
    response = httpx.get(f"{plans.url}/plans", headers=headers)
    assert response.status_code == 401
    body = response.json()
    assert set(body) == ERROR_KEYS and body["code"] == "PGRST301"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "wrong-key" not in response.text and PLANS_KEY not in response.text


@pytest.mark.parametrize("user", [None, "", "default", "Default"])
def test_a_missing_or_default_user_is_refused(http: httpx.Client, user: str | None) -> None:
    headers = {} if user is None else {"X-Parley-User": user}
    response = http.get("/plans", headers=headers)
    assert response.status_code == 400
    body = response.json()
    assert set(body) == ERROR_KEYS and "X-Parley-User" in body["message"]


def test_create_needs_an_idempotency_key(http: httpx.Client) -> None:
    response = http.post("/plans", json={"title": "Q3 review"}, headers=_as("alice"))
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["message"]


def test_create_is_idempotent_per_user_and_key(http: httpx.Client) -> None:
    plan = {"title": "Q3 review", "description": "numbers", "due_date": "2030-09-30"}
    first = http.post("/plans", json=plan, headers=_as("alice", "conversation-s1:call-1"))
    assert first.status_code == 201
    assert "Idempotency-Replayed" not in first.headers
    row = first.json()
    assert row["user_id"] == "alice" and row["status"] == "draft"
    assert row["idempotency_key"] == "conversation-s1:call-1"
    assert row["created_at"] and row["due_date"] == "2030-09-30"

    again = http.post("/plans", json=plan, headers=_as("alice", "conversation-s1:call-1"))
    assert again.status_code == 200
    assert again.headers["Idempotency-Replayed"] == "true"
    assert again.json() == row
    assert len(http.get("/plans", headers=_as("alice")).json()) == 1

    other = http.post(
        "/plans", json={"title": "other"}, headers=_as("alice", "conversation-s1:call-1")
    )
    assert other.status_code == 409
    assert set(other.json()) == ERROR_KEYS

    # The key is scoped to its user: bob's request is his own.
    bobs = http.post("/plans", json=plan, headers=_as("bob", "conversation-s1:call-1"))
    assert bobs.status_code == 201 and bobs.json()["id"] != row["id"]


def test_users_see_only_their_own_plans(http: httpx.Client) -> None:
    alice = http.post("/plans", json={"title": "A"}, headers=_as("alice", "k1")).json()
    bob = http.post("/plans", json={"title": "B"}, headers=_as("bob", "k2")).json()
    assert [p["title"] for p in http.get("/plans", headers=_as("alice")).json()] == ["A"]
    assert http.get(f"/plans/{alice['id']}", headers=_as("alice")).json() == alice
    missing = http.get(f"/plans/{bob['id']}", headers=_as("alice"))
    assert missing.status_code == 404
    assert missing.json()["code"] == "PGRST116"
    patched = http.patch(f"/plans/{bob['id']}", json={"status": "done"}, headers=_as("alice"))
    assert patched.status_code == 404
    assert http.get(f"/plans/{bob['id']}", headers=_as("bob")).json()["status"] == "draft"


def test_update_status(http: httpx.Client) -> None:
    plan = http.post("/plans", json={"title": "A"}, headers=_as("alice", "k1")).json()
    url = f"/plans/{plan['id']}"
    done = http.patch(url, json={"status": "active"}, headers=_as("alice", "k2"))
    assert done.status_code == 200 and done.json()["status"] == "active"
    replay = http.patch(url, json={"status": "active"}, headers=_as("alice", "k2"))
    assert replay.headers["Idempotency-Replayed"] == "true"
    assert http.get("/plans?status=active", headers=_as("alice")).json()[0]["id"] == plan["id"]

    bad = http.patch(url, json={"status": "finished"}, headers=_as("alice"))
    assert bad.status_code == 422
    body = bad.json()
    assert set(body) == ERROR_KEYS and body["code"] == "22023"
    assert body["message"].startswith("status:")
    assert body["details"][0]["field"] == "status"


@pytest.mark.parametrize(
    ("plan", "field"),
    [
        ({}, "title"),
        ({"title": "   "}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"title": "A", "due_date": "next Friday"}, "due_date"),
    ],
)
def test_validation_errors_are_postgrest_422s(
    http: httpx.Client, plan: dict[str, object], field: str
) -> None:
    response = http.post("/plans", json=plan, headers=_as("alice", "k"))
    assert response.status_code == 422
    body = response.json()
    assert set(body) == ERROR_KEYS
    assert body["message"].startswith(f"{field}:")
    assert body["hint"]


def test_rows_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "plans.db"
    headers = {"Authorization": f"Bearer {PLANS_KEY}", **_as("alice", "k1")}
    with BackgroundServer(create_app(db, PLANS_KEY)) as first:
        httpx.post(f"{first.url}/plans", json={"title": "A"}, headers=headers)
    with BackgroundServer(create_app(db, PLANS_KEY)) as second:
        again = httpx.post(f"{second.url}/plans", json={"title": "A"}, headers=headers)
        assert again.status_code == 200  # the key was remembered too
        assert len(httpx.get(f"{second.url}/plans", headers=headers).json()) == 1


def test_faults_and_request_log(http: httpx.Client) -> None:
    queued = http.post("/_test/faults", json={"faults": [{"status": 500}]})
    assert queued.json() == {"queued": 1}
    first = http.get("/plans", headers=_as("alice"))
    assert first.status_code == 500 and set(first.json()) == ERROR_KEYS
    assert http.get("/plans", headers=_as("alice")).status_code == 200

    http.post(
        "/_test/faults",
        json={"faults": [{"status": 429, "retry_after": "3"}, {"status": 502, "raw": "<h1>"}]},
    )
    limited = http.get("/plans", headers=_as("bob"))
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "3"
    assert http.get("/plans", headers=_as("bob")).text == "<h1>"

    seen = http.get("/_test/requests").json()
    assert [(r["method"], r["path"], r["user"], r["status"]) for r in seen] == [
        ("GET", "/plans", "alice", 500),
        ("GET", "/plans", "alice", 200),
        ("GET", "/plans", "bob", 429),
        ("GET", "/plans", "bob", 502),
    ]
    http.delete("/_test/requests")
    assert http.get("/_test/requests").json() == []


def test_test_hooks_are_off_by_default(tmp_path: Path) -> None:
    with BackgroundServer(create_app(tmp_path / "plans.db", PLANS_KEY)) as plans:
        response = httpx.post(f"{plans.url}/_test/faults", json={"faults": [{"status": 500}]})
        assert response.status_code == 404
        assert httpx.get(f"{plans.url}/_test/requests").status_code == 404
