"""Connecting to the Temporal cluster, with a one-line answer when it cannot be reached.

Client side (the CLI, the gateway, the worker's own client; never imported by workflows).
"""

from __future__ import annotations

import re

from temporalio.client import Client
from temporalio.runtime import Runtime

from parley import tracing
from parley.client.errors import ConversationRefused
from parley.errors import ErrorType
from parley.settings import Settings
from parley.storage import data_converter


async def connect(settings: Settings, runtime: Runtime | None = None, role: str = "cli") -> Client:
    """A client for ``settings``' cluster; ``runtime`` (the worker's) may export metrics.
    With traces asked for (``parley.tracing``), it carries them, as ``parley-<role>``."""
    tracing.configure(settings, role)
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            data_converter=data_converter(settings),
            runtime=runtime,
            plugins=tracing.plugins(),
        )
    except RuntimeError as err:
        raise ConversationRefused(
            f"cannot reach Temporal at {settings.temporal_address} ({_connect_reason(err)}). "
            "Is `parley dev` running, or TEMPORAL_ADDRESS set to your cluster?",
            ErrorType.UNREACHABLE,
        ) from err


def _connect_reason(err: Exception) -> str:
    """Why a connection failed, in the words of the OS or the server, without the Rust
    transport's type names (``tonic::transport::Error(Transport, ConnectError(...``)."""
    text = str(err)
    for pattern in (r'message: "([^"]+)"', r'error: "([^"]+)"'):
        found = re.findall(pattern, text)
        if found:
            return found[-1]  # the innermost: the OS's or the server's own words
    text = re.split(r"tonic::|hyper::|Status \{|\(", text, maxsplit=1)[0]
    text = text.removeprefix("Failed client connect:").strip(" :")
    return text or "the connection failed"
