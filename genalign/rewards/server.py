"""`genalign serve-reward`: scorers behind an HTTP server, for trainers on other machines.

Where it fits: a large judge (a VLM, a big preference model) is loaded once on its own
machine and scores for any number of training jobs, which set `reward.runtime=http`
(`http_runtime.py`). Built on aiohttp, a maintained asyncio HTTP server and client that the
Ray dependency already installs (Ray's dashboard runs on it), so the service adds no new
framework and one library serves both ends.

How a request flows: a connection is admitted by the connection guard
(`server_connections.py`: the cap, the per-address quota, the header deadline; a throttled
address is refused there already). The handler refuses a throttled client address (429), then
checks the shared-secret token (401), then the declared `Content-Length` (411 without one, 413
past `--max-request-mb`, both before a byte of the body is read), then reserves those bytes
in the global in-flight budget (503 when `--max-inflight-mb` is full), reads the body within
`--body-timeout-s` (408), decodes it (`wire.py`) and validates it with the same checks as
in-process scoring (400), and submits it to the scheduler (`server_scheduler.py`: 503 when
`--max-queue` requests wait). The scheduler cuts every request into scorer calls of at most
the server's `reward.batch_size` samples and shares the calls fairly between clients; a
client that disconnects has its handler cancelled and its unscored samples dropped. Every
answer is JSON, errors as `{"error": "..."}`.

The command around it (checks, bind, load the scorers, serve until a signal) is
`serve_command.py`; the other limits (bytes in flight, the throttle, the token's strength,
rate-limited logs) are `server_limits.py`, the scheduling `server_scheduler.py`.

Safety: binds 127.0.0.1 unless `--host` says otherwise; every route but /healthz needs
`Authorization: Bearer <token>` where the token is read from an environment variable (never a
flag, which `ps` would show), and a bind reachable from other machines needs a token of at
least 32 characters with 8 distinct ones (or `--insecure-token`); /healthz answers
`{"ok": true}` and nothing more.
Bodies are raw tensors in safetensors, never pickle. The token is not encryption: across
machines use an SSH tunnel or a TLS reverse proxy.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import logging
import math
import socket
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from genalign.config.errors import UserError
from genalign.rewards.base import RewardFunction
from genalign.rewards.composite import LocalRewardRuntime
from genalign.rewards.config import RewardConfig
from genalign.rewards.scores import check_inputs
from genalign.rewards.server_connections import ConnectionGuard, refusal
from genalign.rewards.server_limits import LIMITED_LOGGERS, ByteBudget, ClientThrottle, RateLimitFilter
from genalign.rewards.server_scheduler import FairScheduler, JobError, QueueFull
from genalign.rewards.wire import (
    HEALTH_PATH,
    INFO_PATH,
    SCORE_PATH,
    ScoreRequest,
    WireError,
    decode_request,
    encode_reply,
)
from genalign.version import __version__

log = logging.getLogger(__name__)

DEFAULT_PORT = 8700
LISTEN_BACKLOG = 128
"""Connections the kernel queues before accept (aiohttp's default). Also how many asyncio accepts
in one go, without running anything else: under a flood of connections a larger backlog
(uvicorn's 2048) blocks the event loop for each burst (1024 took 0.3-0.6 s on the development
box), which valid clients see as latency."""
SHUTDOWN_GRACE_S = 30.0
"""How long a stopping server waits for handlers to send their answers."""


@dataclass
class ServeOptions:
    """The server's own settings (`genalign serve-reward --help`); scorers come from reward.*."""

    host: str = "127.0.0.1"
    """Address to bind; loopback by default. 0.0.0.0 serves every interface."""
    port: int = DEFAULT_PORT
    """TCP port (0: any free port, printed at start)."""
    token_env: str = "GENALIGN_REWARD_TOKEN"
    """Environment variable holding the shared-secret token clients must send."""
    max_queue: int = 64
    """Requests that may wait for scoring (one client address at most half of them); one more
    is answered 503 (busy) at once."""
    max_request_mb: float = 256.0
    """Largest request body accepted (MiB); a larger declared Content-Length is answered 413
    before the body is read."""
    max_inflight_mb: float = 1024.0
    """Bytes of request bodies being read, waiting or scored at once (MiB), counted from the
    declared Content-Length before reading; a request that would pass it is answered 503."""
    max_connections: int = 512
    """Open connections; past it the oldest one that has sent no request (else the longest
    idle) is closed, or the new one answered 503 when all are inside a request."""
    max_connections_per_address: int | None = None
    """Open connections one client address may hold (None: a quarter of max_connections); past
    it a new one from that address is answered 503. Behind a reverse proxy, set it to
    max_connections: every client then has the proxy's address."""
    header_timeout_s: float = 15.0
    """A connection must send a complete request's headers within this many seconds of opening
    or of its previous answer, else it is closed (the keep-alive idle limit too)."""
    body_timeout_s: float = 120.0
    """A request's whole body must arrive within this many seconds of its headers, else 408."""
    insecure_token: bool = False
    """Serve a non-loopback address with a token shorter or more repetitive than the minimum."""

    def problems(self) -> list[str]:
        out = []
        if not 0 <= self.port <= 65535:
            out.append(f"--port {self.port} is not a TCP port")
        for flag, value in (
            ("--max-queue", self.max_queue),
            ("--max-connections", self.max_connections),
            ("--max-connections-per-address", self.per_address_limit),
        ):
            if value < 1:
                out.append(f"{flag} {value} must be >= 1")
        for flag, value in (
            ("--max-request-mb", self.max_request_mb),
            ("--max-inflight-mb", self.max_inflight_mb),
            ("--header-timeout-s", self.header_timeout_s),
            ("--body-timeout-s", self.body_timeout_s),
        ):
            if not (math.isfinite(value) and value > 0):
                out.append(f"{flag} {value} must be a finite number > 0")
        if not out and self.max_inflight_mb < self.max_request_mb:
            out.append(
                f"--max-inflight-mb {self.max_inflight_mb:g} must be >= --max-request-mb "
                f"{self.max_request_mb:g}: no request that large could ever be read"
            )
        return out

    @property
    def per_address_limit(self) -> int:
        if self.max_connections_per_address is not None:
            return self.max_connections_per_address
        return max(1, self.max_connections // 4)

    @property
    def max_request_bytes(self) -> int:
        return int(self.max_request_mb * 2**20)

    @property
    def public(self) -> bool:
        """Whether the bind address is reachable from other machines."""
        return not _is_loopback(self.host)


class RewardService:
    """The aiohttp application: routes, token check, limits, the scheduler and its scoring thread."""

    def __init__(self, scorers: dict[str, RewardFunction], cfg: RewardConfig, token: str, options: ServeOptions):
        if not token:
            raise ValueError("RewardService needs a non-empty token")
        self.scorers = scorers
        self.cfg = cfg
        self.options = options
        self._token = token.encode()
        self._throttle = ClientThrottle()
        self.guard = ConnectionGuard(
            options.max_connections, options.per_address_limit, options.header_timeout_s, screen=self._screen
        )
        self._budget = ByteBudget(int(options.max_inflight_mb * 2**20))
        # one thread: the scorers see one call at a time, in order, as with the local runtime
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="genalign-serve",
            initializer=torch.set_num_threads,
            initargs=(torch.get_num_threads(),),
        )
        self.scheduler = FairScheduler(self._score_one, self._executor, cfg.batch_size, options.max_queue)
        self._tasks: list[asyncio.Task] = []
        self._log_filter = RateLimitFilter()

    def app(self):
        from aiohttp import web

        @web.middleware
        async def middleware(request, handler):
            return await self._middleware(request, handler)

        app = web.Application(client_max_size=self.options.max_request_bytes, middlewares=[middleware])
        _SERVICES[app] = self
        app.router.add_get(HEALTH_PATH, self._health)
        app.router.add_get(INFO_PATH, self._info)
        app.router.add_post(SCORE_PATH, self._score)
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._shutting_down)
        app.on_cleanup.append(self._stop)
        app.on_response_prepare.append(_plain_server_header)
        return app

    def runner_options(self) -> dict:
        """What aiohttp's runner is given: its own limits, set from ours."""
        return {
            "handler_cancellation": True,  # a gone client's handler is cancelled: its work is dropped
            "keepalive_timeout": self.options.header_timeout_s,
            "shutdown_timeout": SHUTDOWN_GRACE_S,
        }

    # -- lifecycle ------------------------------------------------------------------------------------

    async def _start(self, app) -> None:
        for name in LIMITED_LOGGERS:
            logging.getLogger(name).addFilter(self._log_filter)
        self._tasks = [asyncio.create_task(self.scheduler.run()), asyncio.create_task(self.guard.sweep())]

    async def _shutting_down(self, app) -> None:
        """Every waiting client gets its answer now (503: retry elsewhere or later)."""
        self.scheduler.fail_all(JobError(503, "the reward server is shutting down"))

    async def _stop(self, app) -> None:
        for task in self._tasks:
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
        for name in LIMITED_LOGGERS:
            logging.getLogger(name).removeFilter(self._log_filter)

    # -- routes ------------------------------------------------------------------------------------

    async def _middleware(self, request, handler):
        from aiohttp import web

        self.guard.request_started(request.protocol)
        try:
            return await handler(request)
        except web.HTTPException as exc:  # aiohttp's own 404 / 405: JSON like every other answer
            if exc.status < 400:
                raise
            allowed = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None  # a 405's
            return _error(
                exc.status,
                f"{exc.reason}: {request.method} {request.path} (routes: GET {HEALTH_PATH}, "
                f"GET {INFO_PATH}, POST {SCORE_PATH})",
                allowed,
            )
        finally:
            self.guard.request_finished(request.protocol)

    async def _health(self, request):
        from aiohttp import web

        return web.json_response({"ok": True})  # nothing about what is served or by which version

    async def _info(self, request):
        from aiohttp import web

        refusal = self._refuse_token(request)
        if refusal is not None:
            return refusal

        return web.json_response(
            {
                "components": list(self.scorers),
                "batch_size": self.cfg.batch_size,
                "max_request_bytes": self.options.max_request_bytes,
                "idle_timeout_s": self.options.header_timeout_s,
                "video_reduction": self.cfg.video_reduction,
                "genalign": __version__,
            }
        )

    async def _score(self, request):
        response = await self._score_request(request)
        if response.status in CLIENT_FAILURES:  # a valid trainer never sends these: counted like wrong tokens
            self._throttle.failed(request.remote or "unknown")
        return response

    async def _score_request(self, request):
        from aiohttp import web

        refused = self._refuse_token(request) or self._refuse_length(request.content_length)
        if refused is not None:
            return refused
        length = request.content_length
        if not self._budget.try_reserve(length):
            return _error(
                503,
                f"busy: {self._budget.used / 2**20:.0f} MiB of requests are in flight and this one "
                f"declares {length / 2**20:.1f} MiB (--max-inflight-mb "
                f"{self.options.max_inflight_mb:g})",
            )
        try:
            scoring = await self._read_request(request, length)
            if not isinstance(scoring, ScoreRequest):
                return scoring  # the error answer
            try:
                job = self.scheduler.submit(request.remote or "unknown", scoring)
            except QueueFull as exc:
                return _error(503, str(exc))
            try:
                outcome = await job.future
            finally:
                self.scheduler.discard(job)  # a cancelled handler (client gone): its samples are not scored
            if isinstance(outcome, JobError):
                return _error(outcome.status, outcome.message)
            return web.json_response(encode_reply(outcome))
        finally:
            self._budget.release(length)

    # -- the checks, in order -----------------------------------------------------------------------

    def _screen(self, address: str) -> bytes | None:
        """At accept: a throttled address is answered 429 before aiohttp builds anything for it."""
        wait_s = self._throttle.wait_s(address)
        if not wait_s:
            return None
        return refusal("429 Too Many Requests", _throttled(address, wait_s), f"Retry-After: {math.ceil(wait_s)}\r\n")

    def _refuse_token(self, request):
        """429 for a client address past its failures (the token is then not compared), 401 for
        a wrong or missing token; None when the request may go on."""
        client = request.remote or "unknown"
        wait_s = self._throttle.wait_s(client)
        if wait_s:
            return _error(429, _throttled(client, wait_s), {"Retry-After": str(math.ceil(wait_s))})
        # surrogateescape: raw non-UTF-8 header bytes compare (unequal) instead of raising
        sent = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if hmac.compare_digest(sent, b"Bearer " + self._token):
            return None
        self._throttle.failed(client)
        log.warning("reward server: wrong or missing token from %s", client)
        return _error(401, f"wrong or missing token (the server reads it from ${self.options.token_env})")

    def _refuse_length(self, length: int | None):
        if length is None:
            return _error(
                411, "send the body with a Content-Length header (chunked bodies are not accepted)", close=True
            )
        if length > self.options.max_request_bytes:
            return _error(
                413,
                f"request body of {length / 2**20:.1f} MiB exceeds the server's --max-request-mb "
                f"{self.options.max_request_mb:g}; lower reward.batch_size",
                close=True,
            )
        return None

    async def _read_request(self, request, length: int):
        """The body within --body-timeout-s, decoded and checked -> ScoreRequest, or the error answer."""
        try:
            async with asyncio.timeout(self.options.body_timeout_s):
                body = await request.content.readexactly(length)
        except TimeoutError:
            return _error(
                408,
                f"the {length} byte body did not arrive within --body-timeout-s {self.options.body_timeout_s:g}",
                close=True,
            )
        except asyncio.IncompleteReadError as exc:
            return _error(400, f"the body ended after {len(exc.partial)} of the {length} bytes declared", close=True)
        try:  # off the event loop: a large body takes a while to parse
            return await asyncio.to_thread(self._decode, body)
        except (WireError, ValueError) as exc:
            return _error(400, str(exc))

    def _decode(self, body: bytes) -> ScoreRequest:
        scoring = decode_request(body)
        unknown = [name for name in scoring.components if name not in self.scorers]
        if unknown:
            raise WireError(f"this server does not serve reward(s) {unknown}; it serves {list(self.scorers)}")
        scoring.metadata = check_inputs(scoring.images, scoring.prompts, scoring.metadata)
        return scoring

    def _score_one(self, request: ScoreRequest) -> dict[str, torch.Tensor]:
        """One scorer call on the scoring thread: the local runtime's checks and errors."""
        scorers = {name: self.scorers[name] for name in request.components}
        runtime = LocalRewardRuntime(
            scorers, dict.fromkeys(scorers, 1.0), self.cfg.batch_size, video_reduction=self.cfg.video_reduction
        )
        with torch.no_grad():
            return runtime.score(request.images, request.prompts, request.metadata).components


CLIENT_FAILURES = (400, 408, 411, 413)
"""Answers to a malformed, slow or oversized request: each counts against the client's throttle."""


def _throttled(client: str, wait_s: float) -> str:
    return f"too many wrong tokens or malformed requests from {client}; retry in {math.ceil(wait_s)} s"


def _error(status: int, message: str, headers=None, close: bool = False):
    from aiohttp import web

    response = web.json_response({"error": message}, status=status, headers=headers)
    if close:  # the unread body is not the next request: the connection ends after this answer
        response.force_close()
    return response


async def _plain_server_header(request, response) -> None:
    response.headers["Server"] = "genalign"  # not aiohttp's default, which names its and Python's version


_SERVICES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""aiohttp Application -> the RewardService that made it (`start_site` runs it with its limits)."""


# ---------------------------------------------------------------- binding and running
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (the first address `host` resolves to), or a
    UserError saying why not: checked before any scorer loads."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise UserError(f"--host {host!r} does not resolve to an address of this machine ({exc})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted server rebinds at once
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = {
            errno.EADDRINUSE: "is already in use: stop what holds it or choose another --port (0: any free port)",
            errno.EACCES: "needs privileges (a port below 1024): choose --port 1024 or above",
            errno.EADDRNOTAVAIL: "is not an address of this machine: choose one of its addresses, or 0.0.0.0",
        }.get(exc.errno, f"cannot be bound: {exc.strerror or exc}")
        raise UserError(f"--host {host} --port {port}: the address {reason}") from None
    sock.setblocking(False)
    return sock


def _guarded_site(runner, sock: socket.socket, guard: ConnectionGuard | None):
    """An aiohttp site on `sock` whose accepted connections pass `guard` first."""
    from aiohttp import web

    class GuardedSite(web.BaseSite):
        @property
        def name(self) -> str:
            return _url(sock)

        async def start(self) -> None:
            await super().start()
            factory = guard.protocol_factory(self._runner.server) if guard else self._runner.server
            self._server = await asyncio.get_running_loop().create_server(factory, sock=sock, backlog=self._backlog)

    return GuardedSite(runner, backlog=LISTEN_BACKLOG)


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def start_site(app, sock: socket.socket):
    """Serve the aiohttp `app` on the listening `sock` -> (runner, "http://host:port" as bound).
    An app made by `RewardService.app()` runs with the service's limits."""
    from aiohttp import web

    service = _SERVICES.get(app)
    options = service.runner_options() if service else {}
    runner = web.AppRunner(app, handle_signals=False, access_log=None, **options)
    await runner.setup()
    await _guarded_site(runner, sock, service.guard if service else None).start()
    return runner, _url(sock)


class BackgroundServer:
    """An aiohttp app (`RewardService.app()`, or any app) on its own event loop in a daemon
    thread (tests, benchmarks, notebooks)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        sock = bind_socket(host, port)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="genalign-reward-server", daemon=True)
        self.thread.start()
        self.runner, self.url = asyncio.run_coroutine_threadsafe(start_site(app, sock), self.loop).result(timeout=60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
