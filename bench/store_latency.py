"""Claim-check write and read latency: the local-directory store against the S3 store
(issue 22), side by side.

Both stores are Parley's own (``parley.storage``): ``LocalFileStorageDriver`` on a
temporary directory, and ``S3PayloadStore`` (``temporalio.contrib.aws.s3driver`` over
aioboto3, Parley's retries) on an S3 API server on 127.0.0.1: ``moto_server`` from
``moto[server]``, started here as its own process (an in-memory Python server: slower
than MinIO or S3 per request, with no network between). Each operation is what the
claim check does for one payload: ``store`` (S3: a HEAD, then the PUT) and
``retrieve`` (S3: a GET and the SHA-256 check). Every payload is new bytes (no
deduplication) and is read back at once.

Sizes: 4 KiB (a transcript segment: the chain writes every segment, whatever its size),
128 KiB (the offload threshold), 1 MiB and 5 MiB. The two stores alternate, operation
by operation, so machine noise hits both; the script prints p50 and p95 per store and
size and the ratio of the p50s, and ends with one line per size:

    store latency 128KiB: write local p50=N ms s3 p50=N ms (xN.N); read local ... s3 ...

Run from the repository root:
    .venv/bin/python bench/store_latency.py [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `parley`, `bench` importable
    sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
from temporalio.api.common.v1 import Payload  # noqa: E402
from temporalio.converter import (  # noqa: E402
    StorageDriver,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from bench._harness import git_revision  # noqa: E402
from parley.config.settings import Settings  # noqa: E402
from parley.storage import LocalFileStorageDriver, build_driver, check_store  # noqa: E402
from parley.storage.clusters import ClusterPart  # noqa: E402

SIZES = {"4KiB": 4 * 1024, "128KiB": 128 * 1024, "1MiB": 1024 * 1024, "5MiB": 5 * 1024 * 1024}
CONTEXT = StorageDriverStoreContext(
    target=StorageDriverWorkflowInfo(namespace="default", id="conversation-bench")
)


def start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/moto-api/")
            connection.getresponse().read()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"moto_server did not start; see {log}") from None
            time.sleep(0.1)


async def timed_round_trip(driver: StorageDriver, payload: Payload) -> tuple[float, float]:
    started = time.perf_counter()
    [claim] = await driver.store(CONTEXT, [payload])
    stored = time.perf_counter()
    [back] = await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    read = time.perf_counter()
    assert back == payload
    return (stored - started) * 1000, (read - stored) * 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(rounds: int, endpoint: str, directory: Path) -> dict[str, dict]:
    credentials = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench-secret"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials).create_bucket(
        Bucket="parley-bench"
    )
    settings = Settings(
        payload_store="s3://parley-bench/latency",
        aws_endpoint_url=endpoint,
        aws_region="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench-secret",
    )
    stores: dict[str, StorageDriver] = {
        "local": LocalFileStorageDriver(directory),
        "s3": build_driver(settings.payload_store, settings),
    }
    check_store(stores["s3"])
    stores["s3"].bind_part(ClusterPart("bench", "default", ""))  # no cluster to ask here
    results: dict[str, dict] = {}
    for label, size in SIZES.items():
        samples = {name: {"write": [], "read": []} for name in stores}
        for n in range(rounds + 2):  # the first two warm up (client, connections)
            for name, driver in stores.items():
                data = f"{label}-{n}-{name}-".encode() + os.urandom(size)[: size - 32]
                payload = Payload(metadata={"encoding": b"binary/plain"}, data=data)
                write, read = await timed_round_trip(driver, payload)
                if n >= 2:
                    samples[name]["write"].append(write)
                    samples[name]["read"].append(read)
        results[label] = {
            name: {
                op: {
                    "p50": statistics.median(values),
                    "p95": percentile(values, 0.95),
                    "n": len(values),
                }
                for op, values in ops.items()
            }
            for name, ops in samples.items()
        }
    await stores["s3"].aclose()  # type: ignore[attr-defined]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="payloads per size and store")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parley-bench-store-") as temp:
        server, endpoint = start_moto(Path(temp) / "moto.log")
        try:
            results = asyncio.run(measure(args.rounds, endpoint, Path(temp) / "local"))
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"revision {git_revision()}; {args.rounds} payloads per size and store")
    print(f"{'size':>7} {'op':>5} {'local p50':>10} {'p95':>8} {'s3 p50':>9} {'p95':>8} {'x':>6}")
    for label, by_store in results.items():
        for op in ("write", "read"):
            local, s3 = by_store["local"][op], by_store["s3"][op]
            print(
                f"{label:>7} {op:>5} {local['p50']:>10.2f} {local['p95']:>8.2f} "
                f"{s3['p50']:>9.2f} {s3['p95']:>8.2f} {s3['p50'] / local['p50']:>6.1f}"
            )
    for label, by_store in results.items():
        parts = []
        for op in ("write", "read"):
            local, s3 = by_store["local"][op]["p50"], by_store["s3"][op]["p50"]
            parts.append(f"{op} local p50={local:.2f} ms s3 p50={s3:.2f} ms (x{s3 / local:.1f})")
        print(f"store latency {label}: " + "; ".join(parts))
    if args.json:
        args.json.write_text(json.dumps({"revision": git_revision(), **results}, indent=2))


if __name__ == "__main__":
    main()
