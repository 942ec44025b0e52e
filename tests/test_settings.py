"""Settings from the environment: a bad value is one clear ValueError naming the variable,
what is wrong and an example; never a silent truncation, an OverflowError, or a value
that the workflow cannot use (``inf`` becomes JSON ``null``)."""

from __future__ import annotations

import pytest

from parley.config.settings import Settings

EXPIRY = "PARLEY_PENDING_EXPIRY_SECONDS"
MODEL_CALLS = "PARLEY_MAX_MODEL_CALLS_PER_TURN"
EVENTS = "PARLEY_CONTINUE_AS_NEW_AFTER_EVENTS"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (EXPIRY, MODEL_CALLS, EVENTS):
        monkeypatch.delenv(name, raising=False)


def test_defaults_and_valid_values(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env()
    assert (settings.pending_expiry_seconds, settings.max_model_calls_per_turn) == (86400, 8)
    assert settings.continue_as_new_after_events == 10_000
    monkeypatch.setenv(EXPIRY, " 90.5 ")
    monkeypatch.setenv(MODEL_CALLS, "3")
    monkeypatch.setenv(EVENTS, "2e3")
    settings = Settings.from_env()
    assert settings.pending_expiry_seconds == 90.5
    assert settings.max_model_calls_per_turn == 3
    assert settings.continue_as_new_after_events == 2000
    assert isinstance(settings.continue_as_new_after_events, int)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        (EXPIRY, "inf"),
        (EXPIRY, "nan"),
        (EXPIRY, "-inf"),
        (EXPIRY, "1e400"),
        (EXPIRY, "1e300"),  # finite, but would overflow the workflow's timedelta
        (EXPIRY, "0"),
        (EXPIRY, "-5"),
        (EXPIRY, "soon"),
        (MODEL_CALLS, "0.5"),
        (MODEL_CALLS, "2.5"),
        (MODEL_CALLS, "0"),
        (MODEL_CALLS, "-1"),
        (MODEL_CALLS, "inf"),
        (MODEL_CALLS, "nan"),
        (MODEL_CALLS, "1e400"),
        (MODEL_CALLS, "eight"),
        (EVENTS, "0.5"),
        (EVENTS, "1e400"),
        (EVENTS, "inf"),
    ],
)
def test_bad_values_are_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError) as caught:
        Settings.from_env()
    message = str(caught.value)
    assert message.startswith(f"{name}={raw!r}")  # which variable, and its value
    assert f"set e.g. {name}=" in message  # an example of a good one
    assert "\n" not in message
    if name != EXPIRY:
        assert "whole number of at least 1" in message


async def test_worker_capacity_comes_from_settings(monkeypatch: pytest.MonkeyPatch, client) -> None:  # type: ignore[no-untyped-def]
    """PARLEY_MAX_CACHED_WORKFLOWS / _CONCURRENT_ACTIVITIES / _CONCURRENT_WORKFLOW_TASKS
    reach the Temporal worker."""
    from parley.activities.models.script_file import ScriptFileChatModel
    from parley.tools import ToolRegistry
    from parley.worker.wiring import build_worker

    monkeypatch.setenv("PARLEY_MAX_CACHED_WORKFLOWS", "50")
    monkeypatch.setenv("PARLEY_MAX_CONCURRENT_ACTIVITIES", "7")
    monkeypatch.setenv("PARLEY_MAX_CONCURRENT_WORKFLOW_TASKS", "3")
    worker = build_worker(
        client,
        Settings.from_env(),
        registry=ToolRegistry([]),
        model=ScriptFileChatModel(entries=[]),
    )
    async with worker:  # it starts and stops with them
        config = worker.config()
    assert config["max_cached_workflows"] == 50
    assert config["max_concurrent_activities"] == 7
    assert config["max_concurrent_workflow_tasks"] == 3


@pytest.mark.parametrize("raw", ["v1.2", "team:v1", "a b", "x/y"])
def test_a_build_id_temporal_cannot_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("PARLEY_BUILD_ID", raw)
    with pytest.raises(ValueError, match=r"PARLEY_BUILD_ID=.* may not contain"):
        Settings.from_env()


def test_versioning_is_off_by_default_and_named_by_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parley.worker.wiring import deployment_config

    monkeypatch.delenv("PARLEY_BUILD_ID", raising=False)
    assert deployment_config(Settings.from_env()) is None
    monkeypatch.setenv("PARLEY_BUILD_ID", "2026-12-03-abc123")
    monkeypatch.setenv("PARLEY_DEPLOYMENT_NAME", "billing-agents")
    config = deployment_config(Settings.from_env())
    assert config is not None and config.use_worker_versioning
    assert config.version.to_canonical_string() == "billing-agents.2026-12-03-abc123"
    assert config.default_versioning_behavior.name == "PINNED"
