"""Safe deploys with Temporal Worker Versioning. Client side (CLI and worker start-up).

A worker started with ``PARLEY_BUILD_ID`` joins the Worker Deployment
``PARLEY_DEPLOYMENT_NAME`` (default ``parley``) as that build. Conversations are pinned
(``ConversationWorkflow`` is ``PINNED``): each run finishes on the build that started
it, and moves to the deployment's *current* build at its next continue-as-new.

Deploying a new build (the README's "Deploying a new worker build") is:

1. start workers of the new build next to the old ones;
2. ``parley deploy NEW_BUILD``: :func:`deploy` makes it current, waits until every task
   queue routes to it, then sends the ``upgrade`` signal to every running conversation
   still on another build. A conversation waiting on people moves to the new build at
   once (its pending calls, transcript and deadlines carried over); one in the middle
   of a turn finishes the turn on its old build and moves right after;
3. stop the old workers once Temporal reports their version drained
   (``temporal worker deployment describe-version``).

The very first versioned worker of a deployment makes its own build current
(:func:`make_current_if_none`), so a fresh cluster needs no step 2.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from temporalio.api.enums.v1 import RoutingConfigUpdateState
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentResponse,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger("parley.deploys")

#: How many ``upgrade`` signals are in flight at once.
SIGNALS_IN_FLIGHT = 32
WORKFLOW_TYPE = "ConversationWorkflow"
IDENTITY = "parley-deploy"
#: Answers to a deployment change that mean "try again".
RETRIED = frozenset(
    {
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.FAILED_PRECONDITION,
        RPCStatusCode.ABORTED,
    }
)


class DeployRefused(ValueError):
    """The deploy cannot go ahead; the message says why and what to do."""


@dataclass(frozen=True)
class DeployReport:
    deployment: str
    build_id: str
    previous_build_id: str | None
    #: Running conversations on another build that were asked to move.
    signalled: int
    #: Those that could not be signalled (closed meanwhile), by workflow id.
    missed: tuple[str, ...] = ()


async def describe(client: Client, deployment: str) -> DescribeWorkerDeploymentResponse | None:
    """The deployment as Temporal knows it, or None before any of its workers polled.
    Temporal serialises a deployment's changes and asks callers to come back while it
    is busy (a worker's first poll registers its version): that is waited out here."""
    request = DescribeWorkerDeploymentRequest(
        namespace=client.namespace, deployment_name=deployment
    )
    for _ in range(120):
        try:
            return await client.workflow_service.describe_worker_deployment(request)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            if err.status not in RETRIED:
                raise
        await asyncio.sleep(0.5)
    return await client.workflow_service.describe_worker_deployment(request)


def current_build(described: DescribeWorkerDeploymentResponse | None) -> str | None:
    if described is None:
        return None
    routing = described.worker_deployment_info.routing_config
    return routing.current_deployment_version.build_id or None


def _known_builds(described: DescribeWorkerDeploymentResponse | None) -> list[str]:
    if described is None:
        return []
    return [
        summary.deployment_version.build_id
        for summary in described.worker_deployment_info.version_summaries
    ]


async def wait_for_build(
    client: Client, deployment: str, build_id: str, *, wait_seconds: float
) -> DescribeWorkerDeploymentResponse:
    """Wait until workers of ``build_id`` have polled (Temporal knows a version only
    from its pollers)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        described = await describe(client, deployment)
        if build_id in _known_builds(described):
            assert described is not None
            return described
        if time.monotonic() > deadline:
            known = ", ".join(_known_builds(described)) or "none"
            raise DeployRefused(
                f"no worker of build {build_id!r} polls deployment {deployment!r} "
                f"(builds seen: {known}); start its workers with PARLEY_BUILD_ID={build_id} "
                f"PARLEY_DEPLOYMENT_NAME={deployment} first"
            )
        await asyncio.sleep(0.5)


async def set_current(
    client: Client, deployment: str, build_id: str, *, wait_seconds: float = 60.0
) -> str | None:
    """Make ``build_id`` the deployment's current build and wait until every task queue
    routes to it. Returns the build that was current before."""
    deadline = time.monotonic() + wait_seconds
    described = await wait_for_build(client, deployment, build_id, wait_seconds=wait_seconds)
    previous = current_build(described)
    while current_build(described) != build_id:
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=deployment,
                    build_id=build_id,
                    conflict_token=described.conflict_token,
                    identity=IDENTITY,
                )
            )
            break
        except RPCError as err:
            # Temporal serialises a deployment's changes: a busy deployment or a change
            # made meanwhile (a stale conflict token) is retried with a fresh look.
            if err.status not in RETRIED or time.monotonic() > deadline:
                raise DeployRefused(
                    f"Temporal refused to make build {build_id!r} current: {err.message}"
                ) from None
        await asyncio.sleep(0.5)
        described = await wait_for_build(client, deployment, build_id, wait_seconds=wait_seconds)
    await _wait_for_routing(client, deployment, build_id, wait_seconds=wait_seconds)
    return previous


async def _wait_for_routing(
    client: Client, deployment: str, build_id: str, *, wait_seconds: float
) -> None:
    deadline = time.monotonic() + wait_seconds
    while True:
        described = await describe(client, deployment)
        if described is not None and current_build(described) == build_id:
            state = described.worker_deployment_info.routing_config_update_state
            if state != RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS:
                return
        if time.monotonic() > deadline:
            raise DeployRefused(
                f"build {build_id!r} is current but its routing did not reach every task "
                f"queue within {wait_seconds:.0f} s; run `parley deploy {build_id}` again"
            )
        await asyncio.sleep(0.2)


async def upgrade_conversations(client: Client, deployment: str, build_id: str) -> DeployReport:
    """Signal ``upgrade`` to every running conversation of ``deployment`` on a build
    other than ``build_id``: each moves to the current build once no turn is in
    flight. Conversations of unversioned workers and of other deployments are left
    alone."""
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
        f" AND TemporalWorkerDeployment = '{deployment}'"
        f" AND TemporalWorkerDeploymentVersion != '{deployment}:{build_id}'"
    )
    ids = [execution.id async for execution in client.list_workflows(query)]
    missed: list[str] = []
    slots = asyncio.Semaphore(SIGNALS_IN_FLIGHT)

    async def nudge(workflow_id: str) -> None:
        async with slots:
            try:
                await client.get_workflow_handle(workflow_id).signal("upgrade")
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                missed.append(workflow_id)  # it ended meanwhile: nothing to move

    await asyncio.gather(*(nudge(workflow_id) for workflow_id in ids))
    return DeployReport(deployment, build_id, None, len(ids) - len(missed), tuple(missed))


async def deploy(
    client: Client, deployment: str, build_id: str, *, wait_seconds: float = 60.0
) -> DeployReport:
    """Make ``build_id`` current and move the conversations on older builds to it."""
    previous = await set_current(client, deployment, build_id, wait_seconds=wait_seconds)
    report = await upgrade_conversations(client, deployment, build_id)
    return DeployReport(deployment, build_id, previous, report.signalled, report.missed)


async def make_current_if_none(client: Client, deployment: str, build_id: str) -> None:
    """The first versioned worker of a deployment makes its build current; a later one
    leaves the choice to ``parley deploy``. Runs beside the worker, after it polls."""
    try:
        described = await wait_for_build(client, deployment, build_id, wait_seconds=60)
        if current_build(described) is not None:
            return
        await set_current(client, deployment, build_id)
        log.info("build %s is the first of deployment %s: made it current", build_id, deployment)
    except (DeployRefused, RPCError) as err:
        log.warning(
            "could not make build %s current (%s); run `parley deploy %s`",
            build_id,
            getattr(err, "message", err),
            build_id,
        )
