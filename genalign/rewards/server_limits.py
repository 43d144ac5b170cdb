"""What keeps the reward server up under load and abuse, beside its connections
(`server_connections.py`): bytes in flight, failed-token throttling, the token's strength,
rate-limited logs.

Where it fits: `server.py` builds one of each per service. aiohttp provides part of what a
server exposed to untrusted clients needs, and it is used for that: request-line and header
size limits (its parser's `max_line_size` / `max_field_size`), `keepalive_timeout`,
`handler_cancellation` (a handler is cancelled when its client disconnects), the listen
backlog. What aiohttp leaves to the application is here, each piece small:

* `ByteBudget`: request bodies are counted from the moment their `Content-Length` is accepted
  (before a byte is read) until the answer, so memory is bounded before the queue, not after
  decoding.
* `ClientThrottle`: per client address, a bucket of failures (a wrong token, a malformed or
  oversized request); an empty bucket answers 429 without comparing the token, so guesses
  are not tested while throttled, and refuses its connections at accept (cheap).
* `token_problems`: a non-loopback bind needs a token of a stated minimum strength.
* `RateLimitFilter`: the same log line at most a few times a minute, then a count of what was
  suppressed; a client's malformed HTTP is one line, not an aiohttp traceback.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

log = logging.getLogger("genalign.rewards.server")


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


# ---------------------------------------------------------------- failed requests
class ClientThrottle:
    """Per client address: `burst` failures (wrong tokens, malformed or oversized requests),
    refilled at one per `refill_s` seconds. A valid trainer never fails this way."""

    def __init__(self, burst: int = 10, refill_s: float = 6.0, max_clients: int = 10_000):
        self.burst = burst
        self.refill_s = refill_s
        self.max_clients = max_clients
        """Addresses remembered (least recently failed forgotten first): bounded memory."""
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (attempts left, at)

    def wait_s(self, client: str) -> float:
        """0 when `client` may send a request now, else the seconds until it may."""
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
        return [
            f"${token_env} holds a space, a control or a non-ASCII character; a token travels in an HTTP header: "
            "use printable ASCII, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        ]
    weak = len(token) < MIN_TOKEN_CHARS or len(set(token)) < MIN_TOKEN_DISTINCT
    if public and weak and not insecure:
        return [
            f"${token_env} is too weak for a server reachable from other machines ({len(token)} characters, "
            f"{len(set(token))} distinct; at least {MIN_TOKEN_CHARS} characters with {MIN_TOKEN_DISTINCT} distinct "
            "are needed): export a random one, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))', "
            "or pass --insecure-token to serve with it anyway"
        ]
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
