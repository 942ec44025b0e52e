"""Whose part of a payload store this is: the Temporal cluster (its cluster id, from
``GetClusterInfo``) and the namespace, and the marker each part keeps of them.

Outside the workflow sandbox (worker, clients): it asks the cluster over a client's
connection and never runs in a workflow.

One directory or bucket may serve several clusters (the machine's default store serves
every cluster of the user: ``parley dev`` in two checkouts, a dev server and a staging
cluster). Each cluster and namespace writes, lists and collects only its own part,
``<cluster id>/<namespace>/`` (``ClusterPart.segment``), so no cluster's retention ever
judges another's conversations: a conversation id means nothing in another cluster. The
cluster id is Temporal's own (a dev server keeps it in its database file; an in-memory
one draws a new one at each start), not the address, which differs between a worker and
a CLI of one cluster (``temporal:7233``, ``localhost:7233``) and is shared by clusters
started one after the other. Where the cluster does not answer ``GetClusterInfo`` (a
hosted service that does not allow it), its address stands for it.

Each part keeps a marker (``part.json``: cluster id, namespace, address, last seen),
written at worker start, so that whoever reads the store can name the other parts.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from temporalio.api.workflowservice.v1 import GetClusterInfoRequest
from temporalio.service import RPCError, RPCStatusCode

if TYPE_CHECKING:
    from temporalio.client import Client


#: Each part's marker, in the part's own folder (or under its key prefix).
MARKER = "part.json"
_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")


def slug(value: str) -> str:
    """``value`` as one path segment (directory name or S3 key segment): characters
    outside ``[A-Za-z0-9._-]`` percent-encoded, never empty, ``.`` or ``..``."""
    text = "".join(
        char if char in _SAFE else "".join(f"%{byte:02X}" for byte in char.encode())
        for char in value
    )
    if text.strip("."):
        return text
    return text.replace(".", "%2E") or "null"


def checked_segment(segment: str) -> str:
    """A part's segment as a claim carries it (``<cluster>/<namespace>``, each written
    by ``slug``), refused when it could name anything else (another folder, a parent)."""
    pieces = segment.split("/")
    if len(pieces) != 2 or any(
        not piece.strip(".") or not set(piece) <= _SAFE | {"%"} for piece in pieces
    ):
        raise ValueError(f"not a payload store part: {segment!r}")
    return segment


@dataclass(frozen=True)
class ClusterPart:
    """A cluster and namespace: whose part of the store a process writes and collects."""

    cluster_id: str
    namespace: str
    #: The address this process reaches the cluster at (the marker names it; it is not
    #: part of the identity).
    address: str = field(default="", compare=False)

    @property
    def segment(self) -> str:
        return f"{slug(self.cluster_id)}/{slug(self.namespace)}"

    def marker(self, now: datetime | None = None) -> bytes:
        return json.dumps(
            {
                "cluster_id": self.cluster_id,
                "namespace": self.namespace,
                "address": self.address,
                "seen": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
            }
        ).encode()


def read_marker(raw: bytes) -> ClusterPart | None:
    """A part's marker, or None for one that cannot be read (never a reason to fail)."""
    try:
        data = json.loads(raw)
        return ClusterPart(str(data["cluster_id"]), str(data["namespace"]), str(data["address"]))
    except (ValueError, KeyError, TypeError):
        return None


async def identify(client: Client) -> ClusterPart:
    """``client``'s cluster (Temporal's cluster id) and namespace."""
    address = client.service_client.config.target_host
    try:
        answer = await client.workflow_service.get_cluster_info(GetClusterInfoRequest())
        cluster_id = answer.cluster_id
    except RPCError as err:
        # Not allowed or not there (a hosted service): the address stands for the
        # cluster. Anything else (unreachable) is raised: a part is never guessed.
        if err.status not in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            raise
        cluster_id = ""
    return ClusterPart(cluster_id or f"address-{address}", client.namespace, address)


def unbound() -> ValueError:
    """A store written to before any client said which cluster it serves."""
    return ValueError(
        "the payload store does not know its Temporal cluster: connect with "
        "parley.client.connection.connect (it attaches its client), or bind the store "
        "to a client (parley.storage.parts.attach_client)"
    )


def shared_line(location: str, mine: ClusterPart, other: ClusterPart) -> str:
    """The one line a worker says when another cluster uses its store."""
    where = f", at {other.address}" if other.address else ""
    return (
        f"PARLEY_PAYLOAD_STORE {location} is also used by cluster {other.cluster_id} "
        f"(namespace {other.namespace}{where}); each cluster writes, lists and collects "
        f"only its own part of it (this one: {mine.segment}/), so neither's retention "
        "touches the other's conversations"
    )
