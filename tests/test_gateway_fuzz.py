"""End to end: bad input at the gateway: schemathesis generates requests from the
gateway's own OpenAPI document (valid and invalid bodies, ids, query strings, wrong
types) and sends them to a real ``parley gateway`` process, whose real worker process
serves a real dev server. Every answer must be a success or a clear 4xx in the gateway's
error shape ``{"error": {"type", "message"}}``: never a 500, never a traceback. (A
request the fuzzer made invalid HTTP, with an empty ``Content-Length``, never reaches a
route: the HTTP server answers it 400 in its own words.) A conversation that waits for a
decision throughout is unharmed after.

Each operation gets schema-valid requests and schema-invalid ones (schemathesis'
positive and negative modes). ``PARLEY_FUZZ_EXAMPLES=N`` sets the examples per
operation and mode (default 25).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from temporalio.testing import WorkflowEnvironment

from parley.storage import LocalFileStorageDriver
from tests.support.gateway import gateway_processes

TOKEN = "fuzz-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = int(os.environ.get("PARLEY_FUZZ_EXAMPLES", "25"))
#: A conversation that waits for a decision while the fuzzer runs.
WAITING = f"fuzz-waiting-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def gateway_url(
    isolated_temporal_env: WorkflowEnvironment,
    payload_store: LocalFileStorageDriver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A real worker process and a real gateway process on the session's dev server."""
    home = tmp_path_factory.mktemp("fuzz")
    with gateway_processes(
        isolated_temporal_env.client,
        payload_store,
        home,
        {TOKEN: "alice"},
        PARLEY_TASK_QUEUE=f"parley-fuzz-{uuid.uuid4().hex[:8]}",
        PARLEY_MAX_MESSAGE_BYTES="4096",
    ) as gateway:
        url = gateway.url
        sent = httpx.post(
            f"{url}/v1/conversations/{WAITING}/messages",
            json={"text": "write it"},
            headers=HEADERS,
            timeout=60,
        )
        assert sent.json()["status"] == "awaiting_approval", sent.text
        yield url
        log = (home / "gateway.log").read_text()
        assert "Traceback" not in log, log[-3000:]


#: What the HTTP server (uvicorn) answers, before any route, to a request that is not
#: valid HTTP: a 400 in its own words, and the connection closed.
INVALID_HTTP = "Invalid HTTP request received."
#: Headers that frame the request itself: a value the fuzzer gives them (an empty
#: ``Content-Length``) can make the request invalid HTTP, which no route ever sees.
FRAMING_HEADERS = {"content-length", "transfer-encoding"}


def _sets_framing(case) -> bool:  # type: ignore[no-untyped-def]
    return any(name.lower() in FRAMING_HEADERS for name in case.headers or {})


def test_every_generated_request_gets_a_clear_answer(gateway_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{gateway_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    # The event stream never ends by design; its resume rules have their own tests.
    fuzzed = [op for op in operations if not op.path.endswith("/events")]
    assert len(fuzzed) >= 7, [f"{op.method} {op.path}" for op in operations]
    answered: Counter[int] = Counter()
    for operation, mode in itertools.product(fuzzed, schemathesis.GenerationMode):

        @given(case=operation.as_strategy(mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        def clear_answer(case) -> None:  # type: ignore[no-untyped-def]
            response = case.call(base_url=gateway_url, headers=HEADERS, timeout=60)
            answered[response.status_code] += 1
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} answered {response.status_code}: "
                f"{response.text[:500]}"
            )
            if response.status_code >= 400:
                if _sets_framing(case) and response.text == INVALID_HTTP:
                    assert response.status_code == 400
                    return
                error = response.json()["error"]
                assert isinstance(error["type"], str) and error["type"]
                assert isinstance(error["message"], str) and error["message"]
                assert "Traceback" not in error["message"]

        try:
            clear_answer()
        except Unsatisfiable:
            # Nothing to make invalid: the operation takes no parameters and no body.
            assert mode == schemathesis.GenerationMode.NEGATIVE, operation.path
    # Both kinds were generated: requests the gateway took and ones it refused.
    assert any(code < 300 for code in answered) and any(code >= 400 for code in answered)
    print(f"gateway fuzz: {sum(answered.values())} requests, by status {dict(answered)}")


def test_the_waiting_conversation_is_unharmed_after_the_fuzzing(gateway_url: str) -> None:
    state = httpx.get(f"{gateway_url}/v1/conversations/{WAITING}", headers=HEADERS, timeout=30)
    assert [c["tool_call_id"] for c in state.json()["pending"]] == ["f1"]
    decided = httpx.post(
        f"{gateway_url}/v1/conversations/{WAITING}/decisions",
        json={"decisions": [{"tool_call_id": "f1", "action": "approve"}]},
        headers=HEADERS,
        timeout=60,
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["reply"] == "written"
