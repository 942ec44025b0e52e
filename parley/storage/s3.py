"""The S3 payload store (``PARLEY_PAYLOAD_STORE=s3://bucket[/prefix]``): Temporal's own
``temporalio.contrib.aws.s3driver`` over its aioboto3 adapter, with retries and a key
prefix, plus the listing and deletion retention needs.

Outside the workflow sandbox (worker, activities, clients). The standard AWS
configuration applies: the credential chain (keys, profile, role), ``AWS_REGION`` and
``AWS_ENDPOINT_URL`` for S3-compatible servers (MinIO). Keys are the driver's:
``v0/ns/<namespace>/wt/<type>/wi/<workflow id>/ri/<run id>/d/sha256/<digest>``, so
every object names the one conversation that stored it, under the part of the cluster
and namespace that stored it (``clusters``): ``<prefix><cluster id>/<namespace>/v0/…``,
with the part's marker ``<cluster id>/<namespace>/part.json`` and retention's records
of what it collected, ``<cluster id>/<namespace>/collected/<referrer>.json`` (never
listed as objects). A claim holds its whole key under the prefix, part included, so any
reader of the bucket reads it; keys written before parts (``<prefix>v0/…``,
``<prefix>collected/…``) are read as they were.
A PUT is atomic in S3 (a reader sees the whole object or none) and the driver checks
each object's SHA-256 on reading, so a payload is never taken whole when it is not.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, TypeVar
from urllib.parse import unquote

import aioboto3
import aiohttp
import boto3
from botocore import exceptions as boto
from botocore.config import Config
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
from temporalio.converter import StorageDriverClaim, StorageDriverStoreContext

from parley.storage.base import UNSPLIT, Collected, PayloadStore, Referrer, StoredObject, Tally
from parley.storage.clusters import MARKER, checked_segment, read_marker

log = logging.getLogger("parley.storage")
T = TypeVar("T")

#: Error codes S3 and S3-compatible servers use for "slow down, try again".
_THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestTimeout"}
)
_REFUSED = frozenset(
    {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken"}
)


@dataclass(frozen=True)
class S3Config:
    """The AWS settings Parley reads (``Settings``); None leaves each to the SDK's chain."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class S3Retry:
    """Transient errors (5xx, throttling, connection resets, timeouts) are retried this
    many times in all, waiting ``first_delay`` doubling up to ``max_delay`` (jittered)."""

    attempts: int = 8
    first_delay: float = 0.2
    max_delay: float = 10.0


def parse_s3_spec(spec: str) -> tuple[str, str]:
    """``s3://bucket[/prefix]`` as (bucket, prefix ending in ``/`` or empty)."""
    bucket, _, prefix = spec.removeprefix("s3://").partition("/")
    valid = 3 <= len(bucket) <= 63 and all(c.islower() or c.isdigit() or c in ".-" for c in bucket)
    if not valid:
        raise ValueError(
            f"PARLEY_PAYLOAD_STORE={spec!r}: {bucket!r} is not an S3 bucket name "
            "(3-63 characters: a-z, 0-9, '.', '-'); set e.g. s3://parley-payloads/prod"
        )
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def transient(err: BaseException) -> bool:
    """Whether retrying ``err`` may succeed: a 5xx, throttling, or a broken connection."""
    if isinstance(err, boto.ClientError):
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = str(err.response.get("Error", {}).get("Code", ""))
        return status >= 500 or status == 429 or code in _THROTTLED
    return isinstance(
        err,
        boto.ConnectionError
        | boto.HTTPClientError
        | boto.IncompleteReadError
        | boto.ResponseStreamingError
        | aiohttp.ClientError
        | ConnectionError
        | TimeoutError,
    )


class S3Objects:
    """One bucket and prefix over aioboto3: a client opened lazily on the running event
    loop, and every call retried on transient errors (botocore's own retries are off, so
    this policy is the only loop)."""

    def __init__(
        self, bucket: str, prefix: str, config: S3Config, retry: S3Retry | None = None
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.config = config
        self.retry = retry or S3Retry()
        self._opened: tuple[asyncio.AbstractEventLoop, Any, Any] | None = None

    def _session_args(self) -> dict[str, Any]:
        credentials = {}
        if self.config.access_key_id and self.config.secret_access_key:
            credentials = {
                "aws_access_key_id": self.config.access_key_id,
                "aws_secret_access_key": self.config.secret_access_key,
                "aws_session_token": self.config.session_token,
            }
        return {**credentials, "region_name": self.config.region}

    def _client_args(self, attempts: int, connect_timeout: float = 10) -> dict[str, Any]:
        # Path-style addressing for S3-compatible servers: bucket names need no DNS.
        style = {"addressing_style": "path"} if self.config.endpoint_url else {}
        return {
            "endpoint_url": self.config.endpoint_url,
            "config": Config(
                retries={"total_max_attempts": attempts, "mode": "standard"},
                s3=style,
                connect_timeout=connect_timeout,
                read_timeout=60,
            ),
        }

    async def client(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._opened is None or self._opened[0] is not loop:
            session = aioboto3.Session(**self._session_args())
            manager = session.client("s3", **self._client_args(attempts=1))
            self._opened = (loop, manager, await manager.__aenter__())
        return self._opened[2]

    async def aclose(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None and opened[0] is asyncio.get_running_loop():
            await opened[1].__aexit__(None, None, None)

    async def call(self, what: str, operation: Callable[[Any], Awaitable[T]]) -> T:
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return await operation(await self.client())
            except Exception as err:
                if attempt == self.retry.attempts or not transient(err):
                    raise
                delay = min(self.retry.max_delay, self.retry.first_delay * 2 ** (attempt - 1))
                log.warning(
                    "S3 %s failed (%s: %s); retry %d of %d",
                    what,
                    type(err).__name__,
                    err,
                    attempt,
                    self.retry.attempts - 1,
                )
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    def check_access(self, spec: str) -> None:
        """HEAD the bucket once (a synchronous client: this runs where the converter is
        built, before anything starts); a missing bucket or refused credentials is one
        ``ValueError`` line."""
        where = self.config.endpoint_url or "AWS S3"
        try:
            # A few quick tries: an unreachable server is said within seconds.
            client = boto3.Session(**self._session_args()).client(
                "s3", **self._client_args(attempts=3, connect_timeout=3)
            )
            client.head_bucket(Bucket=self.bucket)
        except boto.NoCredentialsError:
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec}: no AWS credentials found; set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile or role)"
            ) from None
        except boto.ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket"):
                raise ValueError(
                    f"PARLEY_PAYLOAD_STORE={spec}: bucket {self.bucket!r} does not exist at "
                    f"{where}; create it or name another"
                ) from None
            if code in _REFUSED:
                raise ValueError(
                    f"PARLEY_PAYLOAD_STORE={spec}: {where} refused the credentials for bucket "
                    f"{self.bucket!r} ({code}); check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                    "and the bucket's policy"
                ) from None
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec}: bucket {self.bucket!r} at {where} answered "
                f"{code or err}; check AWS_REGION and AWS_ENDPOINT_URL"
            ) from None
        except (boto.BotoCoreError, ValueError) as err:
            raise ValueError(
                f"PARLEY_PAYLOAD_STORE={spec}: cannot reach {where} ({err}); "
                "check AWS_ENDPOINT_URL and AWS_REGION"
            ) from None


class _RetryingClient(S3StorageDriverClient):
    """The driver's aioboto3 adapter, under the store's prefix and retry policy: it
    writes under the part's ``segment`` and reads the key a claim names (its part in
    it)."""

    def __init__(self, objects: S3Objects, segment: str = "") -> None:
        self._objects = objects
        self._segment = segment

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        full = self._objects.prefix + self._segment + key

        async def put(client: Any) -> None:
            await new_aioboto3_client(client).put_object(bucket=bucket, key=full, data=data)

        await self._objects.call("put", put)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        full = self._objects.prefix + self._segment + key
        return await self._objects.call(
            "head",
            lambda client: new_aioboto3_client(client).object_exists(bucket=bucket, key=full),
        )

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        full = self._objects.prefix + key
        return await self._objects.call(
            "get", lambda client: new_aioboto3_client(client).get_object(bucket=bucket, key=full)
        )

    def describe(self) -> Mapping[str, str]:
        config = self._objects.config
        return {
            name: value
            for name, value in (("endpoint", config.endpoint_url), ("region", config.region))
            if value
        }


def referrer_in_key(key: str) -> Referrer | None:
    """The conversation an object key of the driver names (``.../ns/<ns>/.../wi/<id>/``);
    None for keys stored with no workflow."""
    parts = key.split("/")
    fields = dict(zip(parts[1::2], parts[2::2], strict=False))
    workflow_id = fields.get("wi")
    if not workflow_id or workflow_id == "null":
        return None
    namespace = fields.get("ns", "null")
    return Referrer("" if namespace == "null" else unquote(namespace), unquote(workflow_id))


class S3PayloadStore(S3StorageDriver, PayloadStore):
    """``temporalio.contrib.aws.s3driver.S3StorageDriver`` on one bucket and prefix (or
    one part of it, ``part``), and retention's view of it."""

    def __init__(
        self,
        spec: str,
        config: S3Config,
        retry: S3Retry | None = None,
        *,
        part: str | None = None,
        objects: S3Objects | None = None,
    ) -> None:
        bucket, prefix = parse_s3_spec(spec)
        self.spec = spec
        self.objects = objects or S3Objects(bucket, prefix, config, retry)
        #: The part's keys begin so (after the prefix): ``<cluster>/<namespace>/``.
        self.segment = f"{checked_segment(part)}/" if part else ""
        super().__init__(client=_RetryingClient(self.objects, self.segment), bucket=bucket)

    def part(self, segment: str) -> S3PayloadStore:
        """The part ``segment`` of this bucket and prefix, on the same connection."""
        return S3PayloadStore(self.spec, self.objects.config, part=segment, objects=self.objects)

    def location(self) -> str:
        endpoint = self.objects.config.endpoint_url
        where = f" at {endpoint}" if endpoint else ""
        return f"s3://{self.objects.bucket}/{self.objects.prefix}{self.segment}{where}"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = await super().store(context, payloads)
        # The driver names the key it built; the object is under the part's segment.
        return [
            StorageDriverClaim(
                claim_data={**claim.claim_data, "key": self.segment + claim.claim_data["key"]}
            )
            for claim in claims
        ]

    def check_access(self) -> None:
        self.objects.check_access(self.spec)

    async def inventory(self) -> list[StoredObject]:
        prefix = self.objects.prefix + self.segment
        found = []
        async for item in self._listing(f"{prefix}v0/"):
            modified = item["LastModified"].astimezone(UTC)
            referrer = referrer_in_key(item["Key"][len(prefix) :])
            found.append(
                StoredObject(
                    key=item["Key"],
                    size=item["Size"],
                    modified=modified,
                    referrers={referrer: modified} if referrer else {},
                )
            )
        return found

    async def remove(self, stored: StoredObject) -> bool:
        # One conversation per key (its id is in the key): no one else can have come to
        # refer to it since the inventory.
        await self.objects.call(
            "delete",
            lambda client: client.delete_object(Bucket=self.objects.bucket, Key=stored.key),
        )
        return True

    async def release(self, stored: StoredObject, referrers: list[Referrer]) -> None:
        return None  # a key has one referrer: kept or removed, never shared

    def _record(self, referrer: Referrer) -> str:
        return f"{self.objects.prefix}{self.segment}collected/{referrer.digest()}.json"

    async def record_collected(self, referrer: Referrer, collected: Collected) -> None:
        if await self.collected(referrer) is not None:
            return  # the first record stays

        async def put(client: Any) -> None:
            await client.put_object(
                Bucket=self.objects.bucket, Key=self._record(referrer), Body=collected.to_json()
            )

        await self.objects.call("put", put)

    async def collected(self, referrer: Referrer) -> Collected | None:
        raw = await self._get(self._record(referrer))
        return None if raw is None else Collected.from_json(raw)

    async def write_marker(self, segment: str, marker: bytes) -> None:
        key = f"{self.objects.prefix}{checked_segment(segment)}/{MARKER}"

        async def put(client: Any) -> None:
            await client.put_object(Bucket=self.objects.bucket, Key=key, Body=marker)

        await self.objects.call("put", put)

    async def tally(self) -> list[Tally]:
        """One listing of the prefix: objects by part (``<c>/<n>/v0/…``, or ``v0/…``
        written before parts), and each part's marker."""
        counts: dict[str, list[int]] = {}
        markers: list[str] = []
        async for item in self._listing(self.objects.prefix):
            key, size = item["Key"][len(self.objects.prefix) :], item["Size"]
            pieces = key.split("/")
            if pieces[0] == "v0":
                segment = UNSPLIT
            elif len(pieces) > 3 and pieces[2] == "v0":
                segment = f"{pieces[0]}/{pieces[1]}"
            else:
                if len(pieces) == 3 and pieces[2] == MARKER:
                    markers.append(key)
                    counts.setdefault(f"{pieces[0]}/{pieces[1]}", [0, 0])
                continue
            count = counts.setdefault(segment, [0, 0])
            count[0] += 1
            count[1] += size
        found = []
        for segment, (objects, size) in sorted(counts.items()):
            raw = None
            if f"{segment}/{MARKER}" in markers:
                raw = await self._get(self.objects.prefix + f"{segment}/{MARKER}")
            who = read_marker(raw) if raw is not None else None
            found.append(Tally.marked(segment, objects, size, who))
        return found

    async def _listing(self, prefix: str) -> AsyncIterator[dict[str, Any]]:
        """Every object under ``prefix``, as ``list_objects_v2`` describes it."""
        token: str | None = None
        while True:
            args = {"Bucket": self.objects.bucket, "Prefix": prefix}
            if token:
                args["ContinuationToken"] = token

            async def page(client: Any, args: dict[str, str] = args) -> Any:
                return await client.list_objects_v2(**args)

            listed = await self.objects.call("list", page)
            for item in listed.get("Contents", []):
                yield item
            token = listed.get("NextContinuationToken")
            if not listed.get("IsTruncated") or not token:
                return

    async def _get(self, key: str) -> bytes | None:
        """The object at ``key``; None when there is none."""

        async def get(client: Any) -> bytes | None:
            try:
                answer = await client.get_object(Bucket=self.objects.bucket, Key=key)
            except boto.ClientError as err:
                if str(err.response.get("Error", {}).get("Code", "")) in ("NoSuchKey", "404"):
                    return None
                raise
            return await answer["Body"].read()

        return await self.objects.call("get", get)

    async def aclose(self) -> None:
        await self.objects.aclose()
