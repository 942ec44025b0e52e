"""Every activity's options come from one ``ActivityConfig`` in ``parley.contracts``:
each ``workflow.execute_activity`` call in ``workflows/`` spreads
``**<CONFIG>.options(summary=...)`` (``execute_local_activity``: ``local_options``; no
timeout or retry policy written by hand, and always a summary for the Temporal UI),
workflow code reads no settings, and the options carry exactly the config's timeouts and
policy."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest

from parley.contracts import (
    ARCHIVE_AUDIT_ACTIVITY,
    CANONICAL_ARGS_ACTIVITY,
    MODEL_ACTIVITY,
    NOTIFY_ACTIVITY,
    STORE_GC_ACTIVITY,
    TOOL_ACTIVITY,
    ActivityConfig,
    retry_delay,
)
from parley.contracts.activity_config import model_summary

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"
#: What only the config may set: a call site never passes these itself.
HAND_WRITTEN = {
    "start_to_close_timeout",
    "schedule_to_close_timeout",
    "schedule_to_start_timeout",
    "heartbeat_timeout",
    "retry_policy",
    "summary",
}
CONFIGS = {
    "ARCHIVE_AUDIT_ACTIVITY",
    "CANONICAL_ARGS_ACTIVITY",
    "MODEL_ACTIVITY",
    "NOTIFY_ACTIVITY",
    "INVERSE_ACTIVITY",
    "JUDGE_ACTIVITY",
    "PREVIEW_ACTIVITY",
    "STORE_GC_ACTIVITY",
    "TOOL_ACTIVITY",
}


def activity_calls() -> list[tuple[str, ast.Call]]:
    """Every ``workflow.execute_activity(...)`` (or local one) in workflow code, with where
    it is."""
    found = []
    for path in sorted(WORKFLOWS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr
                in {"execute_activity", "start_activity", "execute_local_activity"}
            ):
                found.append((f"{path.relative_to(WORKFLOWS)}:{node.lineno}", node))
    return found


def test_every_activity_call_spreads_its_config_with_a_summary() -> None:
    calls = activity_calls()
    # model, compaction, tool, canonical args (local, and as recorded before), notify,
    # archive, gc
    assert len(calls) >= 8
    for where, call in calls:
        named = {k.arg for k in call.keywords if k.arg is not None}
        assert not named & HAND_WRITTEN, f"{where} writes {named & HAND_WRITTEN} by hand"
        [spread] = [k.value for k in call.keywords if k.arg is None] or [None]
        assert (
            isinstance(spread, ast.Call)
            and isinstance(spread.func, ast.Attribute)
            and spread.func.attr
            == ("local_options" if call.func.attr == "execute_local_activity" else "options")
            and isinstance(spread.func.value, ast.Name)
            and spread.func.value.id in CONFIGS
        ), f"{where} does not spread **<CONFIG>.options(...)"
        assert [k.arg for k in spread.keywords] == ["summary"], f"{where} gives no summary"


def test_workflow_code_imports_no_settings() -> None:
    for path in WORKFLOWS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("parley.config"), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("parley.config") for a in node.names), path


@pytest.mark.parametrize(
    "config",
    [
        MODEL_ACTIVITY,
        TOOL_ACTIVITY,
        CANONICAL_ARGS_ACTIVITY,
        NOTIFY_ACTIVITY,
        ARCHIVE_AUDIT_ACTIVITY,
        STORE_GC_ACTIVITY,
    ],
)
def test_the_options_are_the_configs_own(config: ActivityConfig) -> None:
    options = config.options(summary="what it does")
    assert options["start_to_close_timeout"] == config.start_to_close
    assert options["retry_policy"] is config.retry
    assert options["summary"] == "what it does"
    # A heartbeat timeout only for an activity that heartbeats (none: no timeout sent).
    assert options.get("heartbeat_timeout") == config.heartbeat
    assert ("heartbeat_timeout" in options) == (config.heartbeat is not None)


def test_a_retry_after_is_capped_at_the_policys_longest_interval() -> None:
    assert retry_delay(None, TOOL_ACTIVITY) is None and retry_delay(0, TOOL_ACTIVITY) is None
    assert retry_delay(3, TOOL_ACTIVITY) == timedelta(seconds=3)
    assert retry_delay(86_400, MODEL_ACTIVITY) == MODEL_ACTIVITY.retry.maximum_interval


def test_a_model_calls_summary_names_its_model_and_subagent() -> None:
    assert model_summary(None) == "default model"
    assert model_summary("openai:gpt-x", "review-1") == "openai:gpt-x for review-1"
    assert model_summary("anthropic:c", compact=True) == "compact with anthropic:c"
