"""Builds the Temporal client and runs Parley's worker: wiring only, no logic.

The worker hosts ``ConversationWorkflow`` and the activities, with the tools of
``PARLEY_TOOLS`` and the model of ``PARLEY_MODEL``, and the payload store's garbage
collection (``StoreGcWorkflow``; the Schedule of ``PARLEY_STORE_GC_EVERY_SECONDS``).
Secrets (API keys) are read here, on the worker, and never enter workflow input or
history. The client's data converter
(``parley.storage.data_converter``) decides where large payloads and transcript segments
go; ``call_model`` writes its transcript chain to the same store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
from langchain_core.language_models import BaseChatModel
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkerDeploymentConfig

from parley.activities.audit_archive import AuditArchiveActivities
from parley.activities.compaction import ContextBudget, known_window
from parley.activities.http import aclose_shared_client, new_http_client
from parley.activities.judging import JudgeActivities, judge_models
from parley.activities.model_calls import ModelActivities
from parley.activities.models import build_chat_model
from parley.activities.models.failover import ListedModels, build_chat_models
from parley.activities.notifications import NotifyActivities
from parley.activities.previews import PreviewActivities
from parley.activities.reply_limits import ReplyLimits
from parley.activities.store_gc import StoreGcActivities
from parley.activities.tool_calls import ToolActivities
from parley.client import connect
from parley.client.connection import core_logging
from parley.config.settings import Settings
from parley.contracts import SEARCH_ATTRIBUTES
from parley.contracts.failover import cooldown_seconds, model_specs
from parley.observability.logs import configure_logging
from parley.observability.redaction import remember_config, remember_secrets
from parley.storage import PayloadStore, TranscriptStore, driver_of, store_of
from parley.storage.audit_archive import AuditArchive
from parley.storage.parts import attach_client, claim_part
from parley.storage.results import WholeResults
from parley.storage.schedule import ensure_gc_schedule
from parley.tools import ToolRegistry, load_registry
from parley.tools.loading import ModelAccess
from parley.worker.code_cache import share_workflow_code
from parley.worker.deploys import make_current_if_none
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.store_gc import StoreGcWorkflow

log = logging.getLogger("parley.worker")


def load_tools_and_model(
    settings: Settings,
    *,
    warn: Callable[[str], None],
    http_client: httpx.AsyncClient | None = None,
) -> tuple[ToolRegistry, BaseChatModel | ListedModels]:
    """The worker's tools (``PARLEY_TOOLS``, each factory handed its own narrow config
    made from ``settings``, the worker's ``http_client`` and the environment) and model
    (``PARLEY_MODEL``), loaded before anything starts.
    Whatever a toolset or a model factory raises becomes one ``ValueError`` naming the
    setting; a worker with no tools is ``warn``-ed about."""
    try:
        registry = load_registry(
            settings.tools, settings=settings, http_client=http_client, environ=os.environ
        )
    except ValueError:
        raise
    except Exception as problem:  # a toolset's own code may raise anything
        raise ValueError(
            f"PARLEY_TOOLS={settings.tools!r}: {type(problem).__name__}: {problem}"
        ) from None
    try:
        model = listed_models(settings)
    except ValueError:
        raise
    except Exception as problem:  # so may a model factory
        raise ValueError(
            f"PARLEY_MODEL={settings.model!r}: {type(problem).__name__}: {problem}"
        ) from None
    load_judges(registry, settings)  # a judge_model that does not load: one line, now
    if not len(registry):
        warn(
            f"no tools: PARLEY_TOOLS={settings.tools!r} loads none, so the model can only "
            "talk (set PARLEY_TOOLS=module:attr[,module:attr...])"
        )
    return registry, model


def listed_models(settings: Settings) -> ListedModels:
    """Every model ``PARLEY_MODEL`` lists, built now (a bad one is one line), with the
    failover cool-down, ``PARLEY_MODEL_FAILOVER_COOLDOWN_SECONDS``: read here from the
    environment beside ``Settings`` (``parley.contracts.failover``)."""
    access = ModelAccess.from_settings(settings)  # the models' keys, not the Settings
    return build_chat_models(settings.model, access, cooldown_seconds(os.environ))


def load_judges(registry: ToolRegistry, settings: Settings) -> JudgeActivities:
    """The judges the policy file's rules name (``judge_model``), each built once as
    ``PARLEY_MODEL`` would build it, with the models' keys (``ModelAccess``)."""
    access = ModelAccess.from_settings(settings)
    return JudgeActivities(judge_models(registry.rules, lambda s: build_chat_model(s, access)))


def context_budget(settings: Settings) -> ContextBudget | None:
    """The model's context budget: ``PARLEY_MODEL_CONTEXT_TOKENS``, else the known
    window of the model; None for a model nobody knows (only a provider's refusal
    then compacts)."""
    windows = [known_window(spec) for spec in model_specs(settings.model)]
    known = [window for window in windows if window is not None]
    # Several models: the smallest window known among them, so a failover fits too.
    tokens = settings.model_context_tokens or (min(known) if known else None)
    if tokens is None:
        return None
    return ContextBudget(tokens, reply_tokens=min(settings.model_reply_tokens, tokens // 2))


def _loaded(
    settings: Settings,
    registry: ToolRegistry | None,
    model: BaseChatModel | ListedModels | None,
    http_client: httpx.AsyncClient | None,
) -> tuple[ToolRegistry, BaseChatModel | ListedModels]:
    """The tools and model a caller passed, else the ones ``settings`` name."""
    if registry is None:
        registry = load_registry(
            settings.tools, settings=settings, http_client=http_client, environ=os.environ
        )
    return registry, model if model is not None else listed_models(settings)


def build_worker(
    client: Client,
    settings: Settings,
    *,
    registry: ToolRegistry | None = None,
    model: BaseChatModel | ListedModels | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> Worker:
    """The worker, wired: ``http_client`` is the one its toolsets (when it loads them)
    and its notifications use; whoever opened it closes it when the worker stops."""
    registry, model = _loaded(settings, registry, model, http_client)
    # The worker's own environment holds the secrets its activities must keep out of
    # history and its logs out of their lines: read here, where the worker is built;
    # and so do its Settings (``parley dev`` makes the plans service's key itself).
    remember_secrets(os.environ)
    remember_config(settings)
    attach_client(client)  # the store's part is the cluster's this client reaches
    share_workflow_code()  # the sandbox runs each workflow module per instance: compile once
    transcripts = TranscriptStore(
        driver_of(client.data_converter), cache_entries=settings.max_cached_workflows
    )
    model_activities = ModelActivities(
        model,
        registry,
        transcripts,
        overload_codes=settings.model_overload_codes,
        notifications=settings.notify_url is not None,
        context_budget=context_budget(settings),
        reply_limits=ReplyLimits(max_bytes=settings.max_model_reply_bytes),
    )
    tool_activities = ToolActivities(
        registry,
        max_result_bytes=settings.max_tool_result_bytes,
        results=WholeResults(driver_of(client.data_converter)),
    )
    audit_archive = AuditArchiveActivities(AuditArchive(driver_of(client.data_converter)))
    previews = PreviewActivities(registry)
    judges = load_judges(registry, settings)
    activities: list[Callable[..., Any]] = [
        model_activities.call_model,
        model_activities.compaction.compact_context,
        tool_activities.canonical_args,
        tool_activities.run_tool,
        previews.preview_call,
        previews.inverse_call,
        judges.judge_call,
        audit_archive.archive_audit,
    ]
    if settings.notify_url:
        notify = NotifyActivities(
            settings.notify_url,
            settings.gateway_url,
            http_client=http_client,
            link_secret=settings.link_secret,
        )
        activities.append(notify.notify)
    # The payload store's retention (the Schedule of PARLEY_STORE_GC_EVERY_SECONDS),
    # on every worker whose store can be listed: any of them may take a scheduled sweep.
    store = driver_of(client.data_converter)
    if isinstance(store, PayloadStore):
        gc = StoreGcActivities(store, settings.store_retention_seconds)
        # Under its namespaced name, and its earlier one for sweeps still in flight.
        activities += [gc.collect_store_garbage, gc.collect_store_garbage_unnamespaced]
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[ConversationWorkflow, StoreGcWorkflow],
        activities=activities,
        # On SIGTERM, running activities may finish for this long (then are cancelled).
        graceful_shutdown_timeout=timedelta(seconds=settings.worker_grace_seconds),
        max_cached_workflows=settings.max_cached_workflows,
        max_concurrent_activities=settings.max_concurrent_activities,
        max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
        deployment_config=deployment_config(settings),
    )


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """With ``PARLEY_BUILD_ID``, the worker is that build of the Worker Deployment
    ``PARLEY_DEPLOYMENT_NAME`` (Worker Versioning; ``parley.worker.deploys``), and conversations
    are pinned: each run finishes on the build that started it (they move to the
    current build at continue-as-new)."""
    if settings.build_id is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment_name, settings.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register Parley's search attributes if the namespace lacks them (idempotent):
    the workflow upserts them, and an unregistered one would stall it. Where the
    operator API is not allowed (Temporal Cloud), say how to register them instead."""
    service = client.operator_service
    try:
        existing = await service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        missing = {
            key.name: _indexed_type(key)
            for key in SEARCH_ATTRIBUTES
            if key.name not in existing.custom_attributes
        }
        if missing:
            await service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
            log.info("registered search attributes %s", ", ".join(missing))
    except RPCError as err:
        wanted = " ".join(
            f"--name {key.name} --type {key._metadata_type}"  # type: ignore[attr-defined]
            for key in SEARCH_ATTRIBUTES
        )
        log.warning(
            "could not check Parley's search attributes (%s); if they are missing, "
            "register them: temporal operator search-attribute create %s",
            err.message,
            wanted,
        )


def metrics_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime that serves Prometheus metrics on ``PARLEY_METRICS_ADDRESS``
    (the SDK's ``temporal_*`` and Parley's ``parley_*``), or None for the default."""
    if not settings.metrics_address:
        return None
    return Runtime(
        telemetry=TelemetryConfig(
            logging=core_logging(),  # the core's lines in the worker's log, never raw
            metrics=PrometheusConfig(bind_address=settings.metrics_address),
        )
    )


def _indexed_type(key: object) -> IndexedValueType.ValueType:
    return {
        "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
        "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
    }[key._metadata_type]  # type: ignore[attr-defined]


async def run_worker(
    settings: Settings,
    *,
    registry: ToolRegistry | None = None,
    model: BaseChatModel | ListedModels | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> None:
    """Connect, register the search attributes and run until SIGTERM or SIGINT, then
    shut down gracefully: no new task is taken, and running activities may finish for
    ``PARLEY_WORKER_GRACE_SECONDS`` (then they are cancelled). Callers that
    check the configuration first (``parley worker``) pass the tools and model they
    loaded, with the HTTP client they loaded them with; otherwise they are loaded here,
    before the cluster is contacted. The HTTP client is closed when the worker stops."""
    http_client = http_client or new_http_client()
    registry, model = _loaded(settings, registry, model, http_client)
    client = await connect(settings, runtime=metrics_runtime(settings), role="worker")
    # The store's part of this cluster and namespace; one line per other cluster in it.
    for line in await claim_part(client, driver_of(client.data_converter)):
        log.warning("%s", line)
    await ensure_search_attributes(client, settings.namespace)
    if settings.store_gc_every_seconds:
        store_of(client.data_converter)  # a store that cannot be listed: one clear line
        await ensure_gc_schedule(
            client, settings.task_queue, timedelta(seconds=settings.store_gc_every_seconds)
        )
    worker = build_worker(client, settings, registry=registry, model=model, http_client=http_client)
    log.info(
        "worker on task queue %r, model %r, %d tools, instructions %s%s",
        settings.task_queue,
        settings.model,
        len(registry),
        registry.agent.instructions.label() if registry.agent.instructions else "none",
        f", build {settings.deployment_name}:{settings.build_id}" if settings.build_id else "",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with worker:  # leaving it shuts down gracefully (graceful_shutdown_timeout)
            if settings.build_id:
                first_build = asyncio.create_task(
                    make_current_if_none(client, settings.deployment_name, settings.build_id)
                )
            await stop.wait()
            if settings.build_id:
                first_build.cancel()
            log.info(
                "stopping: running activities may finish for up to %g s "
                "(PARLEY_WORKER_GRACE_SECONDS)",
                settings.worker_grace_seconds,
            )
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await http_client.aclose()
        await aclose_shared_client()  # a third-party toolset's JsonApiClient given none
        if isinstance(store := driver_of(client.data_converter), PayloadStore):
            await store.aclose()  # the S3 store's connections


def main() -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_format)
    asyncio.run(run_worker(settings))


if __name__ == "__main__":
    main()
