"""Settings from the environment: a bad value is one clear ValueError naming the variable,
what is wrong and an example; never a silent truncation, an OverflowError, or a value
that the workflow cannot use (``inf`` becomes JSON ``null``)."""

from __future__ import annotations

import pytest

from parley.settings import Settings

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
