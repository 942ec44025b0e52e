"""The tests' support package: everything tests share, so that no test imports another.

- ``recording_tools``: real tools that record every run, and their registry;
- ``scripts``: scripted models (the only fake);
- ``transcripts``: assertions on a transcript, new session ids;
- ``long_transcripts``: conversations longer than the workflow's window, made cheaply;
- ``waiting`` (``eventually``) and ``ports`` (``free_port``);
- ``processes``: real worker/gateway processes and their environment;
- ``gateway``, ``plans``, ``dev``, ``cli``, ``browser``, ``webhook``, ``time_skipping``,
  ``policy_tools``, ``agui_client``, ``openai_env``, ``prometheus``: servers, clients and
  fixtures by area (the modules with fixtures are plugins, tests/conftest.py);
- ``liveness_tools``, ``fault_models``, ``mcp_notes_server``, ``mcp_flaky_start``,
  ``openai_fake``, ``store_tools``: loaded by worker processes or run as commands, by
  module path;
- ``s3``: an S3 API server (``moto_server``) and a fault-injecting proxy in front of it;
- ``fake_provider``: what the model providers' servers (``openai_fake``,
  ``anthropic_fake``, ``gemini_fake``) share; ``provider_runs``: the tests' client side
  of them (environment, fixtures, models, conversations, reported usage).

The names below are the ones most tests use, importable as ``tests.support.<name>``."""

from tests.support.processes import slow_write_worker_env
from tests.support.recording_tools import (
    GATE,
    RUNS,
    SLOW_STARTED,
    buggy_tool,
    drop_tables,
    flaky_read,
    guarded_write,
    read_records,
    registry,
    runs_of,
    slow_read,
    strict_write,
    write_record,
)
from tests.support.scripts import OFFERED, ByConversation, call, script

__all__ = [
    "GATE",
    "OFFERED",
    "RUNS",
    "SLOW_STARTED",
    "ByConversation",
    "buggy_tool",
    "call",
    "drop_tables",
    "flaky_read",
    "guarded_write",
    "read_records",
    "registry",
    "runs_of",
    "script",
    "slow_read",
    "slow_write_worker_env",
    "strict_write",
    "write_record",
]
