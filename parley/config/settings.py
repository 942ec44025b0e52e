"""Configuration: every environment variable Parley reads. Outside the workflow
sandbox: read at the entry points (the worker, the gateway, the CLI) and handed on
narrow.

``Settings.from_env`` is the one place the environment is read (``parley dev`` builds
one instead of rewriting ``os.environ``). A secret is a ``field(repr=False)`` (no repr
shows it; ``redaction.remember_config`` redacts those). No toolset or model factory gets
a ``Settings``: each its own config (``parley.tools.loading``). Workflow code never
imports this module: what it needs arrives in its input (``ConversationStart``), and
every activity's timeouts and retry policy are contracts
(``parley.contracts.activity_config``), as are the defaults activities fall back on.
None of those timeouts is read from the environment; one that becomes tunable is read
here and reaches the workflow in its input. ``PARLEY_MODEL_TIMEOUT_SECONDS`` is a
provider request's timeout, handed to the models (``parley.tools.loading.ModelAccess``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import cast

from parley.config.temporal import DEFAULT_NAMESPACE, DEFAULT_TEMPORAL_ADDRESS, TemporalAccess, load
from parley.contracts.busy import WHILE_BUSY_MODES, WhileBusy
from parley.contracts.errors import OVERLOAD_CODES_DEFAULT
from parley.contracts.limits import (
    CONTINUE_AS_NEW_AFTER_EVENTS_DEFAULT,
    MESSAGE_MAX_BYTES_DEFAULT,
    MODEL_CALLS_PER_TURN_DEFAULT,
    MODEL_REPLY_MAX_BYTES_DEFAULT,
    PENDING_EXPIRY_SECONDS_DEFAULT,
    PENDING_EXPIRY_SECONDS_MAX,
    TOOL_RESULT_MAX_BYTES_DEFAULT,
)

DEFAULT_TASK_QUEUE = "parley"
DEFAULT_DEPLOYMENT_NAME = "parley"
DEFAULT_MODEL = "scripted"
DEFAULT_TOOLS = "parley.activities.toolsets.git:toolset"
DEFAULT_PLANS_URL = "http://127.0.0.1:8765"
DEFAULT_GATEWAY_HOST = "127.0.0.1"
DEFAULT_GATEWAY_PORT = 8770
DEFAULT_TEMPORAL_UI_URL = "http://localhost:8233"
DEFAULT_MODEL_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Settings:
    """What the worker and the CLI read from the environment."""

    temporal_address: str = DEFAULT_TEMPORAL_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    #: API key, TLS, gRPC metadata (``parley.config.temporal``; default: plain, no key).
    temporal: TemporalAccess = field(default_factory=TemporalAccess)
    task_queue: str = DEFAULT_TASK_QUEUE
    model: str = DEFAULT_MODEL
    #: The model's context window in tokens (None: the known window of the model, if
    #: any); the model's view is compacted before it would pass this less the reply room.
    model_context_tokens: int | None = None
    model_reply_tokens: int = 4_096
    tools: str = DEFAULT_TOOLS
    #: The policy file (TOML ``[[rule]]`` tables; ``parley.tools.policies``), or None.
    policies_file: str | None = None
    #: The MCP servers of ``parley.activities.toolsets.mcp``: a JSON file of connections.
    mcp_servers: str | None = None
    pending_expiry_seconds: float = PENDING_EXPIRY_SECONDS_DEFAULT
    max_model_calls_per_turn: int = MODEL_CALLS_PER_TURN_DEFAULT
    continue_as_new_after_events: int = CONTINUE_AS_NEW_AFTER_EVENTS_DEFAULT
    #: Where large payloads and transcript segments go (``parley.storage``): a directory,
    #: ``s3://bucket[/prefix]``, or ``module:factory`` returning a Temporal ``StorageDriver``.
    payload_store: str | None = None
    # --- the S3 store: the standard AWS variables (None: the SDK's chain decides) ---
    aws_endpoint_url: str | None = None
    aws_region: str | None = None
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    # --- retention of the payload store (``parley store gc``) ---
    #: How long after a conversation closes its stored payloads are kept; None: the
    #: namespace's retention (nothing outlives the history that refers to it).
    store_retention_seconds: float | None = None
    #: When set, the worker keeps a Temporal Schedule that collects the store's garbage
    #: this often (any worker of the task queue runs it).
    store_gc_every_seconds: float | None = None
    max_message_bytes: int = MESSAGE_MAX_BYTES_DEFAULT
    #: What a message sent while a turn runs does in a conversation this client starts,
    #: unless the message says (``parley.contracts.busy``): reject, enqueue or interrupt.
    while_busy: WhileBusy = "reject"
    #: A tool result whose encoded envelope is larger is cut (the tool is not run again).
    max_tool_result_bytes: int = TOOL_RESULT_MAX_BYTES_DEFAULT
    #: What one model call may return (its reply as stored, in bytes); a reply past it
    #: (streamed or not) fails the turn as a model error (``activities.reply_limits``).
    max_model_reply_bytes: int = MODEL_REPLY_MAX_BYTES_DEFAULT
    #: How long a client waits for a worker to take an update before it says none is
    #: serving the task queue.
    worker_wait_seconds: float = 10.0
    # --- the worker's capacity (the SDK's defaults) ---
    #: Workflows kept in the worker's cache (a conversation replays when evicted).
    max_cached_workflows: int = 1000
    max_concurrent_activities: int = 100
    max_concurrent_workflow_tasks: int = 100
    #: How long a stopping worker (SIGTERM) lets its running activities finish.
    worker_grace_seconds: float = 30.0
    # --- Worker Versioning (safe deploys; README "Deploying a new worker build") ---
    #: The worker's build id: when set, the worker joins the Worker Deployment
    #: ``deployment_name`` as version ``<deployment_name>:<build_id>``, and
    #: conversations are pinned to the build that started them until they move to
    #: the current build at continue-as-new. None: an unversioned worker.
    build_id: str | None = None
    deployment_name: str = DEFAULT_DEPLOYMENT_NAME
    #: ``host:port`` where the worker serves Prometheus metrics (None: no endpoint).
    metrics_address: str | None = None
    #: ``text`` or ``json`` (one JSON object per line, with the session and tool call).
    log_format: str = "text"
    #: The OTLP/HTTP URL traces are posted to (``parley.observability.tracing``); None: no traces.
    otlp_traces_url: str | None = None
    #: The traces' ``service.name`` (``OTEL_SERVICE_NAME``); None: ``parley-<role>``.
    otel_service_name: str | None = None
    # --- the shipped toolsets (worker) ---
    #: The git project registry file (JSON or TOML), and where worktrees go.
    git_projects: str | None = None
    git_worktrees: str | None = None
    plans_url: str = DEFAULT_PLANS_URL
    plans_api_key: str = field(default="", repr=False)
    # --- the model (worker) ---
    openai_api_key: str = field(default="", repr=False)
    openai_base_url: str | None = None
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_base_url: str | None = None
    google_api_key: str = field(default="", repr=False)
    google_base_url: str | None = None
    model_timeout_seconds: float = DEFAULT_MODEL_TIMEOUT_SECONDS
    model_overload_codes: frozenset[str] = OVERLOAD_CODES_DEFAULT
    # --- the gateway (``parley gateway``) ---
    gateway_host: str = DEFAULT_GATEWAY_HOST
    gateway_port: int = DEFAULT_GATEWAY_PORT
    #: Where people reach the gateway's page (links in notifications); by default the
    #: host and port it listens on.
    gateway_public_url: str | None = None
    #: The bearer tokens file: one ``<user id> <token>`` per line (``#`` comments).
    gateway_tokens_file: str | None = None
    #: The largest request body the gateway reads; None: the message limit plus 4 MiB.
    gateway_max_body_bytes: int | None = None
    #: The Temporal Web UI, for links from the page to a conversation's workflow.
    temporal_ui_url: str = DEFAULT_TEMPORAL_UI_URL
    # --- notifications (worker) ---
    #: A webhook called when a conversation starts waiting for a decision.
    notify_url: str | None = None
    #: The key that signs one-time approval links (``parley.contracts.links``), the same on the
    #: workers (which put links in notifications) and the gateway (which takes them).
    link_secret: str | None = field(default=None, repr=False)

    @property
    def gateway_url(self) -> str:
        url = self.gateway_public_url or f"http://{self.gateway_host}:{self.gateway_port}"
        return url.rstrip("/")

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        return cls(
            **load(env),  # TEMPORAL_* and temporal.toml's profile (parley.config.temporal)
            task_queue=env.get("PARLEY_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            model=env.get("PARLEY_MODEL", DEFAULT_MODEL),
            tools=env.get("PARLEY_TOOLS", DEFAULT_TOOLS),
            model_context_tokens=_optional_int(env, "PARLEY_MODEL_CONTEXT_TOKENS"),
            model_reply_tokens=_positive_int(env, "PARLEY_MODEL_REPLY_TOKENS", 4_096),
            policies_file=env.get("PARLEY_POLICIES", "").strip() or None,
            mcp_servers=env.get("PARLEY_MCP_SERVERS", "").strip() or None,
            pending_expiry_seconds=_positive_number(
                env,
                "PARLEY_PENDING_EXPIRY_SECONDS",
                PENDING_EXPIRY_SECONDS_DEFAULT,
                example="3600",
                most=PENDING_EXPIRY_SECONDS_MAX,
            ),
            max_model_calls_per_turn=_positive_int(
                env, "PARLEY_MAX_MODEL_CALLS_PER_TURN", MODEL_CALLS_PER_TURN_DEFAULT
            ),
            continue_as_new_after_events=_positive_int(
                env, "PARLEY_CONTINUE_AS_NEW_AFTER_EVENTS", CONTINUE_AS_NEW_AFTER_EVENTS_DEFAULT
            ),
            payload_store=env.get("PARLEY_PAYLOAD_STORE") or None,
            aws_endpoint_url=env.get("AWS_ENDPOINT_URL", "").strip() or None,
            aws_region=(
                env.get("AWS_REGION", "").strip() or env.get("AWS_DEFAULT_REGION", "").strip()
            )
            or None,
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID", "").strip() or None,
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", "").strip() or None,
            aws_session_token=env.get("AWS_SESSION_TOKEN", "").strip() or None,
            store_retention_seconds=_optional_number(
                env, "PARLEY_STORE_RETENTION_SECONDS", example="2592000", most=10 * 365 * 86400
            ),
            store_gc_every_seconds=_optional_number(
                env, "PARLEY_STORE_GC_EVERY_SECONDS", example="3600", most=30 * 86400
            ),
            max_message_bytes=_positive_int(
                env, "PARLEY_MAX_MESSAGE_BYTES", MESSAGE_MAX_BYTES_DEFAULT
            ),
            max_tool_result_bytes=_positive_int(
                env, "PARLEY_MAX_TOOL_RESULT_BYTES", TOOL_RESULT_MAX_BYTES_DEFAULT
            ),
            max_model_reply_bytes=_positive_int(
                env, "PARLEY_MAX_MODEL_REPLY_BYTES", MODEL_REPLY_MAX_BYTES_DEFAULT
            ),
            while_busy=cast("WhileBusy", _choice(env, "PARLEY_WHILE_BUSY", WHILE_BUSY_MODES)),
            worker_wait_seconds=_positive_number(
                env, "PARLEY_WORKER_WAIT_SECONDS", 10.0, example="10", most=3600
            ),
            max_cached_workflows=_positive_int(env, "PARLEY_MAX_CACHED_WORKFLOWS", 1000),
            max_concurrent_activities=_positive_int(env, "PARLEY_MAX_CONCURRENT_ACTIVITIES", 100),
            worker_grace_seconds=_positive_number(
                env, "PARLEY_WORKER_GRACE_SECONDS", 30.0, example="30", most=3600
            ),
            max_concurrent_workflow_tasks=_positive_int(
                env, "PARLEY_MAX_CONCURRENT_WORKFLOW_TASKS", 100
            ),
            build_id=_version_part(env, "PARLEY_BUILD_ID", None),
            deployment_name=_version_part(env, "PARLEY_DEPLOYMENT_NAME", DEFAULT_DEPLOYMENT_NAME)
            or DEFAULT_DEPLOYMENT_NAME,
            metrics_address=env.get("PARLEY_METRICS_ADDRESS", "").strip() or None,
            log_format=_choice(env, "PARLEY_LOG_FORMAT", ("text", "json")),
            otlp_traces_url=_otlp_traces_url(env),
            otel_service_name=env.get("OTEL_SERVICE_NAME", "").strip() or None,
            git_projects=env.get("PARLEY_GIT_PROJECTS") or None,
            git_worktrees=env.get("PARLEY_GIT_WORKTREES") or None,
            plans_url=env.get("PARLEY_PLANS_URL", "").strip() or DEFAULT_PLANS_URL,
            plans_api_key=env.get("PARLEY_PLANS_API_KEY", "").strip(),
            openai_api_key=env.get("OPENAI_API_KEY", ""),
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            anthropic_api_key=env.get("ANTHROPIC_API_KEY", "").strip(),
            anthropic_base_url=env.get("ANTHROPIC_BASE_URL", "").strip() or None,
            google_api_key=env.get("GOOGLE_API_KEY", "").strip(),
            google_base_url=env.get("GOOGLE_BASE_URL", "").strip() or None,
            model_timeout_seconds=_positive_number(
                env,
                "PARLEY_MODEL_TIMEOUT_SECONDS",
                DEFAULT_MODEL_TIMEOUT_SECONDS,
                example="120",
                most=3600,
            ),
            model_overload_codes=_codes(env, "PARLEY_MODEL_OVERLOAD_CODES", OVERLOAD_CODES_DEFAULT),
            gateway_host=env.get("PARLEY_GATEWAY_HOST", "").strip() or DEFAULT_GATEWAY_HOST,
            gateway_port=_port(env, "PARLEY_GATEWAY_PORT", DEFAULT_GATEWAY_PORT),
            gateway_public_url=env.get("PARLEY_GATEWAY_URL", "").strip() or None,
            gateway_tokens_file=env.get("PARLEY_GATEWAY_TOKENS_FILE", "").strip() or None,
            gateway_max_body_bytes=_optional_int(
                env, "PARLEY_GATEWAY_MAX_BODY_BYTES", 8 * 1024 * 1024
            ),
            temporal_ui_url=(
                env.get("PARLEY_TEMPORAL_UI_URL", "").strip() or DEFAULT_TEMPORAL_UI_URL
            ),
            notify_url=env.get("PARLEY_NOTIFY_URL", "").strip() or None,
            link_secret=_link_secret(env),
        )


Env = os._Environ[str] | dict[str, str]


def _link_secret(env: Env) -> str | None:
    secret = env.get("PARLEY_LINK_SECRET", "").strip()
    if secret and len(secret) < 32:
        raise ValueError(
            f"PARLEY_LINK_SECRET is {len(secret)} characters; use at least 32 random ones, "
            "e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return secret or None


def _positive_number(env: Env, name: str, default: float, *, example: str, most: float) -> float:
    """A finite number in (0, most]: ``inf`` and ``nan`` would not survive JSON into the
    workflow, and a huge one would overflow its timer."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number; set e.g. {name}={example}") from None
    if not math.isfinite(value) or not 0 < value <= most:
        raise ValueError(
            f"{name}={raw!r} must be a number greater than 0 and at most {most:.0f}; "
            f"set e.g. {name}={example}"
        )
    return value


def _optional_number(env: Env, name: str, *, example: str, most: float) -> float | None:
    """:func:`_positive_number`, or None when the variable is unset or empty."""
    if not env.get(name, "").strip():
        return None
    return _positive_number(env, name, 1.0, example=example, most=most)


def _otlp_traces_url(env: Env) -> str | None:
    """OpenTelemetry's own variables: the traces endpoint as given, else the collector's
    with ``/v1/traces``; none when the SDK is disabled (``OTEL_SDK_DISABLED``) or traces
    are (``OTEL_TRACES_EXPORTER=none``)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if traces := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return traces
    if collector := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return f"{collector.rstrip('/')}/v1/traces"
    return None


def _optional_int(env: Env, name: str, example: int = 1) -> int | None:
    """:func:`_positive_int`, or None when the variable is unset or empty."""
    return _positive_int(env, name, example) if env.get(name, "").strip() else None


def _codes(env: Env, name: str, default: frozenset[str]) -> frozenset[str]:
    """Comma-separated codes, lower-cased; setting the variable replaces the defaults."""
    if not (raw := env.get(name, "")).strip():
        return default
    return frozenset(code.strip().lower() for code in raw.split(",") if code.strip())


def _choice(env: Env, name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first is the default)."""
    value = env.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of: {', '.join(choices)}")
    return value


def _version_part(env: Env, name: str, default: str | None) -> str | None:
    """A deployment name or build id: Temporal joins them as ``<name>.<build id>`` in
    older APIs, so neither may contain a dot (nor a colon, its newer separator)."""
    if not (value := env.get(name, "").strip()):
        return default
    if any(mark in value for mark in ".: \t/") or len(value) > 255:
        raise ValueError(
            f"{name}={value!r} may not contain '.', ':', '/' or spaces; "
            f"set e.g. {name}=2026-12-03-a1b2c3d"
        )
    return value


def _port(env: Env, name: str, default: int) -> int:
    value = _positive_int(env, name, default)
    if value > 65535:
        raise ValueError(f"{name}={value} is not a TCP port; set e.g. {name}={default}")
    return value


def _positive_int(env: Env, name: str, default: int) -> int:
    """A whole number >= 1, written ``8`` or ``8.0``; ``0.5`` is refused, not truncated."""
    if not (raw := env.get(name, "").strip()):
        return default
    wrong = f"{name}={raw!r} must be a whole number of at least 1; set e.g. {name}={default}"
    try:
        value = int(raw)
    except ValueError:
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(wrong) from None
        if not math.isfinite(number) or not number.is_integer():
            raise ValueError(wrong) from None
        value = int(number)
    if value < 1:
        raise ValueError(wrong)
    return value
