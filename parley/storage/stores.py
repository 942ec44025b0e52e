"""Choosing the payload store (``PARLEY_PAYLOAD_STORE``) and the data converter that
writes to it: the one converter every worker, client and Replayer uses.

Outside the workflow sandbox (worker, activities, clients). A directory (the default
one too) and an S3 bucket are stores of parts (``parts.PartitionedStore``): each
cluster and namespace has its own part of it. A driver built in code on a directory
alone (``LocalFileStorageDriver(root)``: tests, ``module:factory``) is one part.
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
from parley.storage.base import PayloadStore
from parley.storage.local import LocalFileStorageDriver
from parley.storage.parts import PartitionedStore

if TYPE_CHECKING:
    from parley.config.settings import Settings
    from parley.storage.s3 import S3Config

OFFLOAD_THRESHOLD_BYTES = 128 * 1024
"""Payloads this large or larger go to the store. 128 KiB keeps what people read in the
Temporal UI inline (tool arguments, a 20 KB web page, a plan) and leaves every payload in
history far below Temporal's 2 MB limit and its 256 KB warning."""


def default_store_dir() -> Path:
    """The machine's default store (``$XDG_DATA_HOME/parley/payloads``): every cluster
    of the user has its part of it, ``<cluster id>/<namespace>/``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "parley" / "payloads"


def local_store(root: Path) -> PartitionedStore:
    """The directory ``root`` as a store of parts, one per cluster and namespace."""
    return PartitionedStore(
        LocalFileStorageDriver(root), lambda segment: LocalFileStorageDriver(root, part=segment)
    )


def build_driver(spec: str | None, settings: Settings | None = None) -> StorageDriver:
    """The driver ``PARLEY_PAYLOAD_STORE`` names: a directory (none: the machine's
    default), ``s3://bucket[/prefix]`` (with the AWS settings of ``settings``), both with
    a part per cluster and namespace; or ``module:factory`` returning any
    ``StorageDriver``."""
    if not spec:
        return local_store(default_store_dir())
    if spec.startswith("s3://"):
        from parley.storage.s3 import S3PayloadStore  # boto3 loads only when S3 is used

        whole = S3PayloadStore(spec, s3_config(settings))
        return PartitionedStore(whole, whole.part)
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
    return local_store(Path(spec).expanduser())


def s3_config(settings: Settings | None) -> S3Config:
    """The AWS settings ``Settings`` read (none: the SDK's own chain decides)."""
    from parley.storage.s3 import S3Config

    if settings is None:
        return S3Config()
    return S3Config(
        endpoint_url=settings.aws_endpoint_url,
        region=settings.aws_region,
        access_key_id=settings.aws_access_key_id,
        secret_access_key=settings.aws_secret_access_key,
        session_token=settings.aws_session_token,
    )


#: The stores this process has checked (a converter is built by every connect).
_checked: set[str] = set()


def check_store(driver: StorageDriver) -> None:
    """Check ``driver``'s store once per process: a missing bucket or refused
    credentials is one ``ValueError`` line before anything starts."""
    if isinstance(driver, PayloadStore) and driver.location() not in _checked:
        driver.check_access()
        _checked.add(driver.location())


def describe_store(spec: str | None) -> str:
    """One line naming the store ``PARLEY_PAYLOAD_STORE`` selects."""
    if not spec:
        return (
            f"{default_store_dir()} (local files, a part per cluster and namespace; set "
            "PARLEY_PAYLOAD_STORE to change)"
        )
    return spec


def data_converter(
    settings: Settings | None = None, *, driver: StorageDriver | None = None
) -> DataConverter:
    """``pydantic_data_converter`` with Parley's external storage: the one converter that
    every worker, client and Replayer uses."""
    if driver is None:
        driver = build_driver(settings.payload_store if settings is not None else None, settings)
        check_store(driver)
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


def store_of(converter: DataConverter) -> PayloadStore:
    """The store (directory or S3) a converter from :func:`data_converter` writes to,
    for retention and statistics."""
    return _listable(driver_of(converter))


def open_store(settings: Settings) -> PayloadStore:
    """The store ``settings`` name, checked, for retention and statistics (no client)."""
    store = _listable(build_driver(settings.payload_store, settings))
    check_store(store)
    return store


def _listable(driver: StorageDriver) -> PayloadStore:
    if not isinstance(driver, PayloadStore):
        raise ValueError(
            f"the payload store {driver.name()!r} ({type(driver).__name__}) cannot be listed: "
            "retention and statistics need PARLEY_PAYLOAD_STORE to be a directory or "
            "s3://bucket[/prefix]"
        )
    return driver
