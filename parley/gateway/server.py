"""Running the gateway: uvicorn on the caller's event loop, so the app shares the
caller's Temporal client (``serving``: ``parley dev``, tests), or as a process of its
own (``run_gateway``: ``parley gateway``). Client side.

uvicorn keeps no access log (a request line would carry an approval link's token in
its path) and logs through the process's own handlers (``parley.observability.logs``: redacted), not
handlers of its own; the tokens the gateway takes and its Settings' secrets are
remembered for redaction (``parley.observability.redaction``) before it serves. uvicorn installs no
signal handlers: the process that runs the gateway owns its signals.

Stopping drains (``GatewayServer.shutdown``): the listening socket closes (no new
connection), every stream that follows a conversation ends at once with its
reconnectable end (``streams.Drain``), a turn's stream when its run ends or at the
cut, ``CUT_MARGIN_SECONDS`` before the grace period runs out; uvicorn waits for the
rest of the requests up to the grace period, then cancels them.

``parley gateway`` serves even while Temporal cannot be reached: ``/healthz`` answers,
``/readyz`` and the API 503 ``Unreachable`` (``health.Unconnected``), and it connects
as soon as Temporal answers. On SIGTERM or SIGINT it drains and returns (exit status
0); a second signal cuts the drain short.

With an OpenID Connect issuer (``oidc``, an ``OidcVerifier`` its caller started, so
discovery failed in one line before anything listens), JWT bearers are verified
beside the tokens file; the verifier's HTTP client is closed as the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts.errors import ErrorType
from parley.gateway.access import TokenTable
from parley.gateway.app import create_app
from parley.gateway.guard import max_body_bytes
from parley.gateway.health import Unconnected
from parley.gateway.oidc import OidcVerifier
from parley.gateway.streams import Drain
from parley.observability.redaction import remember_config, remember_values

log = logging.getLogger("parley.gateway")

#: How long ``parley gateway`` lets requests in flight finish once told to stop (within
#: Kubernetes' default 30 s termination grace period).
DEFAULT_GRACE_SECONDS = 25.0
#: In-process (``parley dev``, tests): stopping is quick.
IN_PROCESS_GRACE_SECONDS = 2.0
#: Turn streams are cut this long before the grace period ends (at most half of it),
#: so they end with their reconnectable end rather than be cancelled.
CUT_MARGIN_SECONDS = 5.0
#: How long ``parley gateway`` waits for Temporal before it serves without it.
FIRST_CONNECT_SECONDS = 10.0
#: Pauses between attempts to reach Temporal at start: from the first to the longest.
CONNECT_PAUSE_SECONDS = (1.0, 15.0)


class GatewayServer(uvicorn.Server):
    """uvicorn that drains as it stops, and leaves signals to its process."""

    def __init__(self, app: ASGIApp, drain: Drain, grace_seconds: float) -> None:
        super().__init__(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                access_log=False,
                log_config=None,
                timeout_graceful_shutdown=max(1, round(grace_seconds)),
            )
        )
        self.drain = drain
        self.grace_seconds = grace_seconds

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the process's own handlers stop it (``run_gateway``, ``parley dev``)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # first: no new connection, on this replica
        for listener in sockets or []:
            listener.close()
        cut_after = max(self.grace_seconds - CUT_MARGIN_SECONDS, self.grace_seconds / 2)
        self.drain.begin(cut_after)
        await super().shutdown(sockets)


class Front:
    """The app uvicorn serves: the gateway's, or ``Unconnected`` until it has one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


@dataclass
class Running:
    url: str
    server: GatewayServer
    task: asyncio.Task[None]
    front: Front
    drain: Drain
    apps: list[FastAPI] = field(default_factory=list)
    oidc: OidcVerifier | None = None

    def connected(self, conversations: Conversations, tokens: TokenTable) -> None:
        """Serve the gateway's app, on ``conversations``' Temporal client, from now on."""
        app = create_app(conversations, tokens, drain=self.drain, oidc=self.oidc)
        self.apps.append(app)
        self.front.app = app


@contextlib.asynccontextmanager
async def _running(
    front: Front,
    drain: Drain,
    tokens: TokenTable,
    settings: Settings,
    address: tuple[str, int],
    grace: float,
    oidc: OidcVerifier | None = None,
) -> AsyncIterator[Running]:
    """uvicorn serving ``front`` on ``address`` (port 0: a free one) while the block
    runs; stopped (drained by ``drain``) on the way out. Refuses at once (``OSError``)
    if the port is taken."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError:
        listener.close()
        raise
    bound_host, bound_port = listener.getsockname()[:2]
    remember_values(tokens.secrets())
    remember_config(settings)
    server = GatewayServer(front, drain, grace)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    running = Running(f"http://{bound_host}:{bound_port}", server, task, front, drain, oidc=oidc)
    try:
        while not server.started:
            if task.done():
                task.result()
                raise OSError(f"the gateway on {bound_host}:{bound_port} did not start")
            await asyncio.sleep(0.02)
        yield running
    finally:
        server.should_exit = True
        # uvicorn's own grace period bounds the drain; this only guards against a hang.
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), timeout=grace + 5)
        if not task.done():
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for app in running.apps:
            await app.state.feeds.aclose()
        if oidc is not None:
            await oidc.aclose()
        listener.close()


@contextlib.asynccontextmanager
async def serving(
    conversations: Conversations,
    tokens: TokenTable,
    host: str,
    port: int,
    *,
    grace: float = IN_PROCESS_GRACE_SECONDS,
    oidc: OidcVerifier | None = None,
) -> AsyncIterator[str]:
    """Serve the gateway on ``host:port`` (port 0: a free one) while the block runs;
    yields its base URL. Refuses at once (``OSError``) if the port is taken. Leaving the
    block drains it; a turn's stream may finish its run for ``grace`` seconds. ``oidc``:
    a started verifier of OpenID Connect tokens (closed on the way out)."""
    drain = Drain()
    app = create_app(conversations, tokens, drain=drain, oidc=oidc)
    settings = conversations.settings
    running = _running(Front(app), drain, tokens, settings, (host, port), grace, oidc)
    async with running as served:
        served.apps.append(app)
        yield served.url


async def run_gateway(
    connect: Callable[[], Awaitable[Conversations]],
    settings: Settings,
    tokens: TokenTable,
    host: str,
    port: int,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    on_serving: Callable[[str, str | None], None] = lambda url, problem: None,
    oidc: OidcVerifier | None = None,
) -> None:
    """``parley gateway``: reach Temporal with ``connect`` and serve until SIGTERM or
    SIGINT, then drain and return. A configuration ``connect`` refuses (a payload store
    that does not exist) raises before anything listens; a Temporal that cannot be
    reached does not stop it: it serves ``Unconnected`` meanwhile and tries again.
    ``on_serving(url, problem)`` is told once it listens (``problem``: why Temporal is
    not reached yet, or None). ``oidc``: a started verifier of OpenID Connect tokens."""
    try:
        conversations, problem = await asyncio.wait_for(
            _try_connect(connect), FIRST_CONNECT_SECONDS
        )
    except TimeoutError:  # a silent address: serve meanwhile, and go on trying
        conversations = None
        problem = (
            f"Temporal at {settings.temporal_address} did not answer within "
            f"{FIRST_CONNECT_SECONDS:g} s"
        )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    drain = Drain()
    if conversations is not None:
        first: ASGIApp = create_app(conversations, tokens, drain=drain, oidc=oidc)
    else:
        limit = max_body_bytes(settings)
        first = Unconnected(tokens, limit, problem or "not connected", oidc=oidc)
    address = (host, port)
    front = Front(first)
    async with _running(front, drain, tokens, settings, address, grace_seconds, oidc) as running:
        if isinstance(first, FastAPI):
            running.apps.append(first)

        def on_signal() -> None:
            if stop.is_set():
                running.server.force_exit = True  # a second signal: stop now
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal)
        try:
            on_serving(running.url, problem)
            reaching = None
            if conversations is None:
                reaching = asyncio.create_task(_keep_connecting(connect, running, tokens))
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({running.task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if reaching is not None:
                reaching.cancel()
            running.server.should_exit = True
            await asyncio.wait({running.task})  # drained (a second signal cuts it short)
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)


async def _try_connect(
    connect: Callable[[], Awaitable[Conversations]],
) -> tuple[Conversations | None, str | None]:
    """Connected, or why Temporal cannot be reached (any other refusal raises)."""
    try:
        return await connect(), None
    except ConversationRefused as refusal:
        if refusal.error_type != ErrorType.UNREACHABLE:
            raise
        return None, refusal.message


async def _keep_connecting(
    connect: Callable[[], Awaitable[Conversations]], running: Running, tokens: TokenTable
) -> None:
    """Try to reach Temporal, pausing longer each time, until it answers; meanwhile
    ``Unconnected`` says why not."""
    pause = CONNECT_PAUSE_SECONDS[0]
    unconnected = running.front.app
    while True:
        await asyncio.sleep(pause)
        pause = min(pause * 2, CONNECT_PAUSE_SECONDS[1])
        try:
            conversations, problem = await _try_connect(connect)
        except Exception as failed:  # a store that went away meanwhile: one line, again later
            conversations, problem = None, " ".join(str(failed).split()) or repr(failed)
        if conversations is not None:
            running.connected(conversations, tokens)
            log.info("the gateway reached Temporal: ready")
            return
        if isinstance(unconnected, Unconnected) and problem:
            unconnected.problem = problem
