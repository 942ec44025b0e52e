"""Where large values live: Temporal's claim-check storage and the model's transcript chain.

Outside the workflow sandbox (worker, activities, clients); the workflow only ever sees
the small references this module hands out.

Two things keep every payload in history small, whatever the conversation's length:

- **Claim check** (``temporalio.converter.ExternalStorage``). Every component (worker,
  CLI, gateway, tests, Replayer) builds its data converter with :func:`data_converter`:
  ``pydantic_data_converter`` plus external storage. A payload of
  ``OFFLOAD_THRESHOLD_BYTES`` or more (an activity's input or result, an update's
  argument or result, the continue-as-new input) is written to the store once and
  history keeps a reference of about 200 bytes. Smaller payloads stay inline, so the
  Temporal UI shows ordinary arguments and results as readable JSON.
- **Transcript chain** (:class:`TranscriptStore`). The model needs the whole transcript
  on every call; sending it as the activity's input would copy it into history (or into
  the store) once per model call. Instead ``call_model`` appends the messages that are
  new since its previous call as one immutable segment pointing at the previous one, and
  returns the segment's :class:`~parley.contracts.ContextRef`. Every message is stored
  once; a worker rebuilds the transcript from the chain (cached in memory) and clients
  read older pages of a long conversation from it.

The store is chosen by ``PARLEY_PAYLOAD_STORE``: a directory (``local``: ``parley dev``,
tests and single-host deployments), ``s3://bucket[/prefix]`` (``s3``: Temporal's S3
driver, for several hosts; the standard AWS settings apply), or ``module:factory`` for
any other ``StorageDriver``. Every worker and client of a namespace must use the same
store. A directory (the machine's default one too) or bucket holds a part per Temporal
cluster and namespace (``clusters``, ``parts``): each writes, lists and collects only
its own, so clusters sharing a store never judge each other's conversations. The
directory and S3 stores implement one interface (``base.PayloadStore``) that also lists
each object with the conversations referring to it; ``retention`` deletes what no open
or recently closed conversation can read (``parley store gc``, or the worker's
Schedule, ``schedule``), and records when, per conversation (``base.Collected``), so a
reader can say so.

Modules: ``base`` (the interface), ``local``, ``s3``, ``clusters`` (whose part: the
cluster id), ``parts`` (a store of parts), ``stores`` (choosing the store, the data
converter), ``transcripts`` (the chain), ``audit_archive`` (audit entries older than the
kept window), ``results`` (tool results kept whole when the model read them cut),
``retention``, ``schedule``.
"""

from parley.storage.base import PayloadStore, Referrer, StoredObject
from parley.storage.local import LocalFileStorageDriver
from parley.storage.parts import PartitionedStore
from parley.storage.stores import (
    OFFLOAD_THRESHOLD_BYTES,
    build_driver,
    check_store,
    data_converter,
    default_store_dir,
    describe_store,
    driver_of,
    open_store,
    store_of,
)
from parley.storage.transcripts import (
    CHECKPOINT_EVERY_MESSAGES,
    TRANSCRIPT_CACHE_CHARS,
    TranscriptSegment,
    TranscriptStore,
)

__all__ = [
    "CHECKPOINT_EVERY_MESSAGES",
    "OFFLOAD_THRESHOLD_BYTES",
    "TRANSCRIPT_CACHE_CHARS",
    "LocalFileStorageDriver",
    "PartitionedStore",
    "PayloadStore",
    "Referrer",
    "StoredObject",
    "TranscriptSegment",
    "TranscriptStore",
    "build_driver",
    "check_store",
    "data_converter",
    "default_store_dir",
    "describe_store",
    "driver_of",
    "open_store",
    "store_of",
]
