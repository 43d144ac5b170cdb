"""What keeps the reward server up under load and abuse: connection cap and header deadline,
bytes in flight, failed-token throttling, the token's strength, rate-limited logs.

Where it fits: `server.py` builds one of each per service. aiohttp provides part of what a
server exposed to untrusted clients needs, and it is used for that: request-line and header
size limits (its parser's `max_line_size` / `max_field_size`), `keepalive_timeout` (closes a
connection idle after an answer, or whose next request's headers are unfinished; since
aio-libs/aiohttp#13681 also a connection that never sends a request), `handler_cancellation`
(a handler is cancelled when its client disconnects), the listen backlog. What aiohttp leaves
to the application is here, each piece small:

* `ConnectionGuard`: at most `--max-connections` open connections, below the process's file
  descriptor limit (so accept() never fails with EMFILE, which asyncio logs on every retry).
  When a new connection would pass the cap, the oldest connection that has not sent a request
  yet is closed (a slowloris connection never completes its headers), else the longest-idle
  keep-alive one; connections inside a request are never closed, and a new connection finding
  only those gets a 503. A sweep closes any connection that sent no complete request within
  `--header-timeout-s`, whatever aiohttp's version does on its own. (uvicorn answers 503 past
  its `--limit-concurrency`; evicting idle connections first keeps valid clients served while
  an attacker holds many.)
* `ByteBudget`: request bodies are counted from the moment their `Content-Length` is accepted
  (before a byte is read) until the answer, so memory is bounded before the queue, not after
  decoding.
* `AuthThrottle`: per client address, a bucket of failed-token attempts; an empty bucket
  answers 429 without comparing the token, so guesses are not tested while throttled.
* `token_problems`: a non-loopback bind needs a token of a stated minimum strength.
* `RateLimitFilter`: the same log line at most a few times a minute, then a count of what was
  suppressed; a client's malformed HTTP is one line, not an aiohttp traceback.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict

log = logging.getLogger("genalign.rewards.server")

DESCRIPTOR_RESERVE = 64
"""File descriptors kept free beside the connections: model files, logs, the scoring thread's own."""
LINGER_S = 2.0
"""How long a refused connection's request is drained after its 503."""
MAX_LINGERING = 64
"""Refused connections drained at once; past it a refused connection is closed at once."""
SWEEP_EVERY_S = 1.0
"""How often connections past their header deadline are looked for."""
REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
           b"Content-Length: 76\r\n\r\n"
           b'{"error": "busy: every connection is inside a request (--max-connections)"}\n')


# ---------------------------------------------------------------- connections
class _Refused(asyncio.Protocol):
    """A connection past the cap while every open one is inside a request: a 503, then closed.
    The client's request is read and dropped for a moment after the answer (a close with
    unread data would reset the connection and lose the 503), but only for `MAX_LINGERING`
    such connections at once, so refusing never holds many descriptors."""

    lingering = 0
    timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(REFUSED)
        if _Refused.lingering >= MAX_LINGERING or not transport.can_write_eof():
            transport.close()
            return
        try:
            transport.write_eof()  # the answer is complete; the client's bytes still drain below
        except OSError:  # the client is already gone
            transport.close()
            return
        _Refused.lingering += 1
        self.timer = asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client is done too: close

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            _Refused.lingering -= 1
            self.timer.cancel()
            self.timer = None


class ConnectionGuard:
    """The connection cap and the first request's header deadline (see the module docstring).

    Every open connection is in one of three states: fresh (accepted, no request yet; in
    accept order), busy (inside a request) or idle (between keep-alive requests; longest idle
    first). Evicting and sweeping take from the front of the fresh and idle orders, so each
    accepted connection costs O(1) however many are open."""

    def __init__(self, limit: int, header_timeout_s: float):
        self.limit = limit
        self.header_timeout_s = header_timeout_s
        self._server = None  # aiohttp's web.Server: the protocol factory and its live connections
        self._fresh: OrderedDict[object, float] = OrderedDict()  # handler -> accepted at
        self._idle: OrderedDict[object, float] = OrderedDict()  # handler -> idle since
        self._unregistered = 0
        self._closing: set = set()
        """Connections this guard closed that aiohttp still lists (their connection_lost is pending)."""

    def protocol_factory(self, server):
        """What the listening socket calls per accepted connection (instead of `server` itself)."""
        self._server = server

        def accept():
            if self._open_count(server) >= self.limit and not self._evict():
                log.warning("reward server: %d connections open, every one inside a request (--max-connections); "
                            "answering 503 to a new one", self.limit)
                return _Refused()
            handler = server()
            self._fresh[handler] = time.monotonic()
            self._count_until_registered()
            return handler

        return accept

    def _open_count(self, server) -> int:
        """Open connections: aiohttp's list, less those closed here and not yet gone, plus those
        accepted in this burst and not yet listed."""
        self._closing = {handler for handler in self._closing if handler.transport is not None}  # None: gone
        return len(server.connections) - len(self._closing) + self._unregistered

    def _count_until_registered(self) -> None:
        """asyncio accepts a burst of connections (up to the backlog) before any of them is made
        (and listed in aiohttp's `connections`): count those, so a burst cannot pass the cap."""
        self._unregistered += 1
        if self._unregistered == 1:  # every connection_made of this burst runs before the second call_soon
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self._registered)

    def _registered(self) -> None:
        self._unregistered = 0

    def request_started(self, handler) -> None:
        self._fresh.pop(handler, None)
        self._idle.pop(handler, None)

    def request_finished(self, handler) -> None:
        if _open(handler):
            self._idle[handler] = time.monotonic()

    def _evict(self) -> bool:
        """Close the oldest fresh connection, else the longest idle one; False when none is open.
        A fresh one accepted in this same burst is not made yet: it is closed right after its
        connection_made, which asyncio has already queued ahead of the close."""
        now = time.monotonic()
        for order, what in ((self._fresh, "that had sent no request"), (self._idle, "idle")):
            while order:
                handler, since = order.popitem(last=False)
                unmade = handler.transport is None and order is self._fresh and now - since < SWEEP_EVERY_S
                if unmade:
                    asyncio.get_running_loop().call_soon(self._close, handler)
                if unmade or self._close(handler):
                    log.warning("reward server: %d connections open (--max-connections): closed the oldest one %s",
                                self.limit, what)
                    return True
        return False

    def _close(self, handler) -> int:
        if not _open(handler):
            return 0
        handler.transport.close()
        self._closing.add(handler)
        return 1

    async def sweep(self) -> None:
        """Forever: close connections past their header deadline, forget closed ones."""
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            self.sweep_once()

    def sweep_once(self) -> None:
        deadline = time.monotonic() - self.header_timeout_s
        late = 0
        while self._fresh and next(iter(self._fresh.values())) < deadline:
            handler, _ = self._fresh.popitem(last=False)
            late += self._close(handler)
        for handler in [handler for handler in self._idle if not _open(handler)]:  # closed by aiohttp or the client
            del self._idle[handler]
        if late:
            log.warning("reward server: closed %d connection(s) that sent no complete request within "
                        "--header-timeout-s %g", late, self.header_timeout_s)


def _open(handler) -> bool:
    transport = handler.transport  # None before the connection is made and once aiohttp closes it
    return transport is not None and not transport.is_closing()




def descriptor_problem(max_connections: int) -> str | None:
    """Raise this process's soft file-descriptor limit to fit `max_connections` (up to the hard
    limit, as nginx's worker_rlimit_nofile does); a message when it cannot."""
    needed = max_connections + DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard == resource.RLIM_INFINITY or hard >= needed:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
            return None
        return (f"--max-connections {max_connections} needs {needed} file descriptors ({DESCRIPTOR_RESERVE} kept for "
                f"the process itself) but this process may open at most {hard} (ulimit -Hn); lower "
                f"--max-connections to {max(hard - DESCRIPTOR_RESERVE, 1)} or raise the limit")
    return None


# ---------------------------------------------------------------- bytes in flight
class ByteBudget:
    """Bytes of request bodies accepted and not yet answered (one event loop: no lock)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.used = 0

    def try_reserve(self, size: int) -> bool:
        if self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size


# ---------------------------------------------------------------- failed tokens
class AuthThrottle:
    """Per client address: `burst` failed attempts, refilled at one per `refill_s` seconds."""

    def __init__(self, burst: int = 10, refill_s: float = 6.0, max_clients: int = 10_000):
        self.burst = burst
        self.refill_s = refill_s
        self.max_clients = max_clients
        """Addresses remembered (least recently failed forgotten first): bounded memory."""
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (attempts left, at)

    def wait_s(self, client: str) -> float:
        """0 when `client` may try a token now, else the seconds until it may."""
        left = self._left(client, time.monotonic())
        return 0.0 if left >= 1 else (1 - left) * self.refill_s

    def failed(self, client: str) -> None:
        now = time.monotonic()
        self._buckets[client] = (self._left(client, now) - 1, now)
        self._buckets.move_to_end(client)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)

    def _left(self, client: str, now: float) -> float:
        left, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), left + (now - at) / self.refill_s)


MIN_TOKEN_CHARS = 32
MIN_TOKEN_DISTINCT = 8


def token_problems(token: str, token_env: str, public: bool, insecure: bool) -> list[str]:
    """The token must be sendable in a header; on a non-loopback bind also at least
    MIN_TOKEN_CHARS characters with MIN_TOKEN_DISTINCT distinct ones (secrets.token_urlsafe(32)
    gives 43 characters, ~256 bits), unless --insecure-token."""
    if not all(33 <= ord(char) <= 126 for char in token):
        return [f"${token_env} holds a space, a control or a non-ASCII character; a token travels in an HTTP header: "
                "use printable ASCII, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"]
    weak = len(token) < MIN_TOKEN_CHARS or len(set(token)) < MIN_TOKEN_DISTINCT
    if public and weak and not insecure:
        return [f"${token_env} is too weak for a server reachable from other machines ({len(token)} characters, "
                f"{len(set(token))} distinct; at least {MIN_TOKEN_CHARS} characters with {MIN_TOKEN_DISTINCT} distinct "
                "are needed): export a random one, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))', "
                "or pass --insecure-token to serve with it anyway"]
    return []


# ---------------------------------------------------------------- logs
class RateLimitFilter(logging.Filter):
    """The same message (logger and format string) at most `burst` times per `period_s`; the next
    one let through says how many were suppressed. A client's malformed HTTP, which aiohttp
    logs with a traceback, becomes one line."""

    def __init__(self, burst: int = 5, period_s: float = 60.0):
        super().__init__()
        self.burst = burst
        self.period_s = period_s
        self._windows: OrderedDict[tuple[str, str], list[float]] = OrderedDict()  # key -> [start, passed, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        _one_line_if_client_error(record)
        key = (record.name, str(record.msg))
        now = time.monotonic()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.period_s:
            dropped = window[2] if window else 0
            window = self._windows[key] = [now, 0, 0]
            self._windows.move_to_end(key)
            while len(self._windows) > 1000:
                self._windows.popitem(last=False)
            if dropped:
                record.msg = f"{record.msg} ({dropped:.0f} similar line(s) suppressed in the last {self.period_s:g} s)"
        if window[1] >= self.burst:
            window[2] += 1
            return False
        window[1] += 1
        return True


def _one_line_if_client_error(record: logging.LogRecord) -> None:
    """aiohttp logs a request it cannot parse (garbage, an oversized header) with a traceback:
    the client's fault, so one line naming the error."""
    from aiohttp.http_exceptions import HttpProcessingError

    if record.exc_info and isinstance(record.exc_info[1], HttpProcessingError):
        record.msg = f"{record.getMessage()}: {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        record.args = ()
        record.exc_info = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"


LIMITED_LOGGERS = ("aiohttp.server", "aiohttp.web", "aiohttp.access", "asyncio", log.name)
"""Loggers a flood of clients can make write: rate-limited while a service runs."""

