"""Choosing the payload store (``PARLEY_PAYLOAD_STORE``) and the data converter that
writes to it: the one converter every worker, client and Replayer uses.

Outside the workflow sandbox (worker, activities, clients).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, ExternalStorage, StorageDriver

from parley.contracts import PayloadConverter
from parley.storage.local import LocalFileStorageDriver

if TYPE_CHECKING:
    from parley.settings import Settings

OFFLOAD_THRESHOLD_BYTES = 128 * 1024
"""Payloads this large or larger go to the store. 128 KiB keeps what people read in the
Temporal UI inline (tool arguments, a 20 KB web page, a plan) and leaves every payload in
history far below Temporal's 2 MB limit and its 256 KB warning."""


def default_store_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "parley" / "payloads"


def build_driver(spec: str | None) -> StorageDriver:
    """The driver ``PARLEY_PAYLOAD_STORE`` names: a directory, or ``module:factory``
    returning a ``StorageDriver`` (an S3 driver in production)."""
    if not spec:
        return LocalFileStorageDriver(default_store_dir())
    module_name, sep, attr = spec.partition(":")
    if sep and module_name and attr and "/" not in spec and "\\" not in spec:
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec!r}: cannot load {attr!r} from {module_name!r} "
                f"({err}); give a directory or module:factory"
            ) from None
        driver = factory()
        if not isinstance(driver, StorageDriver):
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec!r} returned {type(driver).__name__}, not a "
                "temporalio.converter.StorageDriver"
            )
        return driver
    return LocalFileStorageDriver(Path(spec).expanduser())


def describe_store(spec: str | None) -> str:
    """One line naming the store ``PARLEY_PAYLOAD_STORE`` selects."""
    if not spec:
        return f"{default_store_dir()} (local files; set PARLEY_PAYLOAD_STORE to change)"
    return spec


def data_converter(
    settings: Settings | None = None, *, driver: StorageDriver | None = None
) -> DataConverter:
    """``pydantic_data_converter`` with Parley's external storage: the one converter that
    every worker, client and Replayer uses."""
    if driver is None:
        driver = build_driver(settings.payload_store if settings is not None else None)
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=PayloadConverter,
        external_storage=ExternalStorage(
            drivers=[driver], payload_size_threshold=OFFLOAD_THRESHOLD_BYTES
        ),
    )


def driver_of(converter: DataConverter) -> StorageDriver:
    """The storage driver a converter from :func:`data_converter` writes to."""
    if converter.external_storage is None or not converter.external_storage.drivers:
        raise ValueError("this data converter has no external storage; use data_converter()")
    return converter.external_storage.drivers[0]
