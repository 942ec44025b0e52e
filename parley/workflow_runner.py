"""The worker's workflow runner: Temporal's sandbox, with the serialization contexts the
SDK asks each workflow instance for answered without entering the sandbox each time.

Worker side only (``parley.worker.build_worker`` passes it as ``workflow_runner``); the
workflow code, its sandbox restrictions (the SDK's defaults) and every payload's bytes
are the same as with ``SandboxedWorkflowRunner()``.

Why: for every payload of every activation and completion, temporalio (1.35) asks the
workflow instance for a serialization context and, with external storage, a store
context (``_CommandAwareDataConverter._get_current_dc``, ``_workflow.py``; several
decode and encode passes per activation). The sandboxed instance answers by compiling
and ``exec``-ing a code string inside the sandbox, with its import restrictions entered
and left: ~0.1 ms a question, 38 questions per confirmed turn of ``bench/``. Parley's
converter ignores the context, but which context a payload gets must stay exactly the
SDK's.

How: :class:`ContextCachingWorkflowInstance` wraps the SDK's instance.

- ``None`` (a payload tied to no command): the SDK answers from the workflow's info
  alone (``WorkflowSerializationContext(namespace, workflow_id)`` and a store context
  targeting this run: ``_WorkflowInstanceImpl.get_serialization_context`` and
  ``get_external_store_context``), and the info never changes for an instance, so the
  answers are computed once, outside the sandbox.
- A command (an activity, a child workflow, a signal to another workflow, completing a
  child...): the answer depends on the instance's pending-command tables, so it is asked
  of the sandbox, but once per command between two activations, then memoized. Not
  answered with the workflow's own context: Parley starts child workflows and signals
  its parent, whose contexts name the other workflow.
- Everything else goes to the wrapped instance.

Measured (2026-12-03, ``209bebd``, 2 shared cores; with and without this runner,
interleaved, the same hour): the sandbox is entered 6 times per confirmed turn instead
of 38 (each of the 3 activities' context and store context, once); the worker's CPU per
confirmed turn in ``bench/throughput.py`` falls by ~4-7 ms (~58 to ~54 ms with 1 worker,
~61 to ~55 ms with 2). Throughput, start rate and decide latency against bare moved by
less than the run-to-run noise, and RSS not at all: a real saving of pure overhead, far
from the third of the worker's CPU an instrumenting profiler (yappi) had attributed to it.

The invariant it relies on: an instance's answer for a command changes only inside
``activate`` (that is where the workflow code runs and the pending tables change), and
the SDK never asks for a context while the same instance is being activated (a run has
one activation at a time; decoding comes before ``activate``, encoding after; after a
deadlock timeout it encodes a failure, whose payloads belong to no command). So the
memo is cleared when ``activate`` starts and again when it returns; between two
activations it holds exactly what the sandbox would answer. This is the SDK's private
behaviour, not its contract: **re-check it on every temporalio upgrade**
(``temporalio/worker/_workflow.py``, ``workflow_sandbox/_runner.py``,
``_workflow_instance.py``), and run ``tests/test_workflow_runner.py``, which compares
every answer with the SDK's own during real conversations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.converter import (
    SerializationContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

if TYPE_CHECKING:
    import temporalio.workflow
    from temporalio.bridge.proto.workflow_activation import WorkflowActivation
    from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
    from temporalio.worker._command_aware_visitor import CommandInfo


class ContextCachingWorkflowInstance(WorkflowInstance):
    """A workflow instance that answers serialization and store contexts without
    entering the sandbox for each payload; everything else is ``inner``'s."""

    def __init__(self, inner: WorkflowInstance) -> None:
        self.inner = inner
        info = inner.get_info()
        # What the SDK answers for None (_workflow_instance.py, 1.35).
        self._workflow_context = WorkflowSerializationContext(
            namespace=info.namespace, workflow_id=info.workflow_id
        )
        self._workflow_store_context = StorageDriverStoreContext(
            target=StorageDriverWorkflowInfo(
                id=info.workflow_id,
                run_id=info.run_id,
                type=info.workflow_type,
                namespace=info.namespace,
            )
        )
        self._contexts: dict[CommandInfo, SerializationContext | None] = {}
        self._store_contexts: dict[CommandInfo, StorageDriverStoreContext] = {}

    def _forget(self) -> None:
        self._contexts.clear()
        self._store_contexts.clear()

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self._forget()
        try:
            return self.inner.activate(act)
        finally:
            self._forget()

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        if command_info is None:
            return self._workflow_context
        try:
            return self._contexts[command_info]
        except KeyError:
            context = self.inner.get_serialization_context(command_info)
            self._contexts[command_info] = context
            return context

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        if command_info is None:
            return self._workflow_store_context
        try:
            return self._store_contexts[command_info]
        except KeyError:
            context = self.inner.get_external_store_context(command_info)
            self._store_contexts[command_info] = context
            return context

    def get_info(self) -> temporalio.workflow.Info:
        return self.inner.get_info()

    def get_thread_id(self) -> int | None:
        return self.inner.get_thread_id()


@dataclass(frozen=True)
class ContextCachingSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` (same fields, same restrictions) whose instances are
    :class:`ContextCachingWorkflowInstance`. A dataclass subclass, so the SDK's
    ``isinstance`` checks and ``dataclasses.replace`` (plugins) keep working."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return ContextCachingWorkflowInstance(super().create_instance(det))
