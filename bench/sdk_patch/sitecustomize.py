"""Bench-only runtime patches of the temporalio SDK for ``bench/sdk_context.py``, worker
side (the worker subprocess's interpreter loads this at start-up when
``bench/sdk_patch`` is on its ``PYTHONPATH``). Nothing in Parley imports it.

``PARLEY_BENCH_SDK_PATCH`` (comma-separated) says what to change; unset, nothing is:

- ``direct``: the sandbox answers the per-payload questions "which serialization
  context?" and "which store context?" (``workflow_sandbox._runner._Instance.
  get_serialization_context`` / ``get_external_store_context``) by calling the
  sandboxed instance directly, instead of compiling and ``exec``-ing a code string
  under the sandbox's import restrictions each time. The answer is the same object
  (both are read-only lookups of the instance's pending commands).
- ``unsandboxed``: every ``Worker`` runs its workflows with ``UnsandboxedWorkflowRunner``:
  what the whole sandbox costs (an upper bound; it drops the sandbox's checks).
- ``noupsert``: workflow code's ``workflow.upsert_search_attributes`` does nothing (what
  Parley's search-attribute upserts cost the dev server; ``parley list`` cannot filter
  such conversations: an experiment, not a proposal).
- ``inline``: Parley's local payload store writes a claim in the event loop's thread
  (``LocalFileStorageDriver.store`` calls ``_store_all`` directly) instead of handing
  it to a thread with ``asyncio.to_thread``.
- ``whole``: ``call_model`` asks a model that cannot stream (it does not override
  LangChain's ``_astream``) for its reply with ``ainvoke``, not through ``astream``
  and the reply streamer (``activities.model_calls._streamed_reply`` with no sender).
- ``count``: counts the context questions and workflow activations, and writes them
  as JSON to ``PARLEY_BENCH_SDK_COUNT_FILE`` every second.
"""

from __future__ import annotations

import os

_MODES = {m for m in os.environ.get("PARLEY_BENCH_SDK_PATCH", "").split(",") if m}


def _direct() -> None:
    from temporalio.worker.workflow_sandbox import _runner

    def get_serialization_context(self, command_info):  # type: ignore[no-untyped-def]
        return self.globals_and_locals["__temporal_in_sandbox"].get_serialization_context(
            command_info
        )

    def get_external_store_context(self, command_info):  # type: ignore[no-untyped-def]
        return self.globals_and_locals["__temporal_in_sandbox"].get_external_store_context(
            command_info
        )

    _runner._Instance.get_serialization_context = get_serialization_context  # type: ignore[method-assign]
    _runner._Instance.get_external_store_context = get_external_store_context  # type: ignore[method-assign]


def _unsandboxed() -> None:
    from temporalio.worker import UnsandboxedWorkflowRunner, _worker

    original = _worker.Worker.__init__

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["workflow_runner"] = UnsandboxedWorkflowRunner()
        original(self, *args, **kwargs)

    _worker.Worker.__init__ = init  # type: ignore[method-assign]


def _noupsert() -> None:
    from temporalio import workflow

    workflow.upsert_search_attributes = lambda *args, **kwargs: None  # type: ignore[assignment]


def _parley_modules() -> None:
    """The worker runs from the repository root (its cwd): import Parley from there."""
    import sys

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _inline() -> None:
    _parley_modules()
    from parley.storage import local

    async def store(self, context, payloads):  # type: ignore[no-untyped-def]
        blobs = [p.SerializeToString() for p in payloads]
        return self._store_all(blobs, local.referrer_of(context))

    local.LocalFileStorageDriver.store = store  # type: ignore[method-assign]


def _whole() -> None:
    _parley_modules()
    from langchain_core.language_models import BaseChatModel

    from parley.activities import model_calls

    original = model_calls._streamed_reply

    async def streamed_reply(model, messages, send, *args, **kwargs):  # type: ignore[no-untyped-def]
        if type(model)._astream is BaseChatModel._astream:
            send = None
        return await original(model, messages, send, *args, **kwargs)

    model_calls._streamed_reply = streamed_reply


def _count() -> None:
    import json
    import threading
    import time

    from temporalio.worker import _workflow
    from temporalio.worker.workflow_sandbox import _runner

    counts = {"serialization_context": 0, "store_context": 0, "activations": 0}
    path = os.environ["PARLEY_BENCH_SDK_COUNT_FILE"]

    def counting(name: str, key: str, cls: type) -> None:
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            counts[key] += 1
            return original(self, *args, **kwargs)

        setattr(cls, name, wrapper)

    counting("get_serialization_context", "serialization_context", _runner._Instance)
    counting("get_external_store_context", "store_context", _runner._Instance)
    counting("activate", "activations", _workflow._RunningWorkflow)

    def dump() -> None:
        while True:
            time.sleep(1)
            with open(path, "w", encoding="utf-8") as out:
                json.dump(counts, out)

    threading.Thread(target=dump, daemon=True, name="bench-sdk-count").start()


if "direct" in _MODES:
    _direct()
if "unsandboxed" in _MODES:
    _unsandboxed()
if "noupsert" in _MODES:
    _noupsert()
if "inline" in _MODES:
    _inline()
if "whole" in _MODES:
    _whole()
if "count" in _MODES:
    _count()
