"""The payload store's garbage collection as the workflow, its activity and the
Schedule agree on it: the sweep's input, the collection's input and its report.

Pure pydantic, both sides. JSON-compatible with the plain dicts these replaced: a
Schedule made before (its input ``{}``) and a history recorded before (a dict report)
still decode. Plain ``BaseModel``, not ``Contract``: the report keeps its empty fields
(``"dry_run": false``, ``"deleted": []``), as clients reading it as a dict expect.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class StoreGcInput(BaseModel):
    """What the Schedule starts ``StoreGcWorkflow`` with (``{}`` reads as the default)."""

    model_config = ConfigDict(extra="ignore")

    #: Report what would be deleted, delete nothing.
    dry_run: bool = False


class CollectGarbageInput(BaseModel):
    """What the workflow asks ``collect_store_garbage`` for: a collection as of ``now``
    (the workflow's own time, so a retried attempt judges by the same clock)."""

    model_config = ConfigDict(extra="ignore")

    now: datetime
    dry_run: bool = False


class DeletedObject(BaseModel):
    """One object a collection deleted (or would delete), and who had stored it."""

    key: str
    bytes: int
    conversations: list[str] = Field(default_factory=list)


class StoreTally(BaseModel):
    """A part of the store the collection never touches: another cluster's or
    namespace's, or what was written before the store kept parts (``part`` None)."""

    part: str | None = None
    cluster_id: str | None = None
    namespace: str | None = None
    address: str | None = None
    objects: int = 0
    bytes: int = 0


class StoreGcReport(BaseModel):
    """What one collection deleted (or, with ``dry_run``, would delete): what
    ``parley store gc`` prints and the Schedule's runs return."""

    model_config = ConfigDict(extra="ignore")

    dry_run: bool
    retention_seconds: float
    now: datetime
    deleted_objects: int = 0
    deleted_bytes: int = 0
    deleted: list[DeletedObject] = Field(default_factory=list)
    #: The conversations whose stored content was (or would be) deleted.
    conversations: list[str] = Field(default_factory=list)
    kept_objects: int = 0
    kept_bytes: int = 0
    released_marks: int = 0
    spared_objects: int = 0
    elsewhere: list[StoreTally] = Field(default_factory=list)
