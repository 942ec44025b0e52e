"""What ``parley.observability.redaction`` takes out of a failure or a log line, without
a server: every value it was told to remember (the environment's ``*KEY``, ``*TOKEN``,
``*SECRET`` and ``*PASSWORD`` variables, a configuration's fields kept out of its repr,
a gateway's tokens), longest first, and anything shaped like a secret, in text and in
JSON-like data alike. The remembered values are the process's: each test uses values
of its own."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from parley.observability.redaction import (
    REDACTED,
    redact,
    remember_config,
    remember_secrets,
    remember_values,
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def test_the_environment_s_secret_variables_are_remembered_by_their_names() -> None:
    key, token, secret, password, plain = (unique(p) for p in ("k", "t", "s", "p", "v"))
    remember_secrets(
        {
            "PLANS_API_KEY": key,
            "gateway_token": token,
            "LINK_SECRET": secret,
            "DB_PASSWORD": password,
            "PARLEY_TASK_QUEUE": plain,
        }
    )
    text = f"refused {key} {token} {secret} {password} on {plain}"
    assert redact(text) == f"refused {REDACTED} {REDACTED} {REDACTED} {REDACTED} on {plain}"


def test_a_value_too_short_to_be_a_secret_is_not_remembered() -> None:
    remember_values(["abc12", "  "])
    assert redact("abc12 stays") == "abc12 stays"


def test_the_longest_secret_goes_first_so_no_part_of_one_is_left() -> None:
    short = unique("tok")
    long = f"{short}-and-more"
    remember_values([short, long])
    assert redact(f"x {long} y") == f"x {REDACTED} y"


def test_a_configuration_s_fields_kept_out_of_its_repr_are_remembered() -> None:
    @dataclass
    class Config:
        name: str
        key: str = field(repr=False)
        timeout: float = field(default=1.0, repr=False)

    config = Config(name=unique("shown"), key=unique("hidden"))
    remember_config(config)
    assert redact(f"{config.name} {config.key} 1.0") == f"{config.name} {REDACTED} 1.0"


def test_anything_shaped_like_a_secret_goes_without_being_remembered() -> None:
    for shaped in (
        "sk-proj-abcdef123456",
        "Bearer eyJhbGciOiJIUzI1NiJ9",
        "AIza" + "x" * 35,
        "eyJzZXNzaW9uIjoicyJ9.c2lnbmF0dXJlLW9mLWEtbGluaw",
    ):
        assert redact(f"got {shaped} back") == f"got {REDACTED} back", shaped
    assert redact("https://x.test/v1?api_key=abc123&q=1") == f"https://x.test/v1?{REDACTED}&q=1"
    assert redact("a task-queue and a skeleton stay") == "a task-queue and a skeleton stay"


def test_json_like_data_is_redacted_inside_and_keeps_its_shape() -> None:
    secret = unique("nested")
    remember_values([secret])
    data = {"error": {"message": f"bad {secret}", "codes": (401, None, True, 1.5)}, 7: [secret]}
    assert redact(data) == {
        "error": {"message": f"bad {REDACTED}", "codes": [401, None, True, 1.5]},
        "7": [REDACTED],
    }
    # Anything else is redacted as its text.
    assert redact(ValueError(f"no {secret}")) == f"no {REDACTED}"
