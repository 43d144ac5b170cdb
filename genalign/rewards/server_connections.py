"""The reward server's connections: a cap below the descriptor limit, a quota per client
address, a deadline for the first request's headers.

Where it fits: `server.py` listens through `ConnectionGuard.protocol_factory`: asyncio hands
each accepted connection to a `Connection`, which learns the peer's address, asks the guard to
admit it and only then builds aiohttp's own request handler, to which it passes every event.
What aiohttp provides is used: its `keepalive_timeout` (set to `--header-timeout-s`) closes a
connection idle after an answer or stuck in its next request's headers, and since
aio-libs/aiohttp#13681 also one that never sends a request; the sweep here does the latter
whatever aiohttp's version. What it leaves to the application:

* a cap (`--max-connections`, kept below the process's file-descriptor limit, so accept()
  never fails with EMFILE, which asyncio logs on every retry). A connection past the cap
  closes the oldest open connection that has sent no request yet (a slowloris connection
  never does), else the longest-idle keep-alive one; connections inside a request are never
  closed, and when only those are left the new one gets a 503. uvicorn answers 503 past its
  `--limit-concurrency`; closing idle connections first keeps valid clients served while
  an attacker holds many.
* a quota per client address (`--max-connections-per-address`, like nginx's `limit_conn`):
  one attacker cannot take the whole cap, and its connections past the quota are answered
  503 and closed before aiohttp builds anything for them (cheap, however fast it retries).
  Behind a reverse proxy every client shares the proxy's address: raise the quota to the cap.
* the application's `screen`: an address it refuses outright (the server's throttled
  clients: 429) is answered the same cheap way, at accept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from collections import Counter, OrderedDict
from typing import Callable

log = logging.getLogger("genalign.rewards.server")

DESCRIPTOR_RESERVE = 64
"""File descriptors kept free beside the connections: model files, logs, the scoring thread's own."""
LINGER_S = 2.0
"""How long a refused connection's request is drained after its 503."""
MAX_LINGERING = 64
"""Refused connections drained at once; past it a refused connection is closed at once."""
SWEEP_EVERY_S = 1.0
"""How often connections past their header deadline are looked for."""


def refusal(status: str, message: str, headers: str = "") -> bytes:
    """A whole HTTP answer with a JSON error, written before aiohttp builds anything for the connection."""
    body = json.dumps({"error": message}).encode() + b"\n"
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n{headers}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


FULL = refusal("503 Service Unavailable", "busy: every connection is inside a request (--max-connections)")
OVER_QUOTA = refusal(
    "503 Service Unavailable", "busy: this address holds its share of connections (--max-connections-per-address)"
)


class Connection(asyncio.Protocol):
    """What asyncio sees for one accepted connection: admitted (or refused) once its peer is
    known, then every event passed to aiohttp's handler; its loss updates the guard's counts.

    A refused connection is answered 503; its request is read and dropped for a moment after
    the answer (a close with unread data would reset the connection and lose the 503), for at
    most `MAX_LINGERING` refused connections at once."""

    lingering = 0

    def __init__(self, guard: "ConnectionGuard"):
        self.guard = guard
        self.handler = None  # aiohttp's RequestHandler, once admitted
        self.address = ""
        self.transport = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if peer else "unknown"
        refusal = self.guard.admit(self)
        if refusal is None:
            self.handler.connection_made(transport)
            return
        transport.write(refusal)
        if Connection.lingering >= MAX_LINGERING or not transport.can_write_eof():
            transport.close()
            return
        try:
            transport.write_eof()  # the answer is complete; the client's bytes drain below
        except OSError:  # the client is already gone
            transport.close()
            return
        Connection.lingering += 1
        self.timer = asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received() if self.handler is not None else False

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            Connection.lingering -= 1
            self.timer.cancel()
            self.timer = None
        self.guard.lost(self)
        if self.handler is not None:
            self.handler.connection_lost(exc)

    def close(self) -> bool:
        """Close it (False when it is already closing)."""
        if self.transport is None or self.transport.is_closing():
            return False
        self.transport.close()
        return True


class ConnectionGuard:
    """The cap, the per-address quota and the header deadline (see the module docstring).

    An admitted connection is fresh (no request yet; in accept order), busy (inside a request)
    or idle (between keep-alive requests; longest idle first). Admitting, evicting and
    sweeping take from the front of those orders: O(1) per connection however many are open."""

    def __init__(
        self,
        limit: int,
        per_address: int,
        header_timeout_s: float,
        screen: Callable[[str], bytes | None] = lambda address: None,
    ):
        self.screen = screen
        """The application's answer to an address it refuses outright (a throttled client), or None."""
        self.limit = limit
        self.per_address = per_address
        self.header_timeout_s = header_timeout_s
        self._make_handler = None  # aiohttp's web.Server: builds a RequestHandler per connection
        self._open: set[Connection] = set()
        self._closing: set[Connection] = set()
        """Closed here, not yet lost: no longer counted against the cap."""
        self._addresses: Counter[str] = Counter()
        self._fresh: OrderedDict[Connection, float] = OrderedDict()  # -> accepted at
        self._idle: OrderedDict[Connection, float] = OrderedDict()  # -> idle since
        self._of_handler: dict[object, Connection] = {}

    def protocol_factory(self, server):
        """What the listening socket calls per accepted connection (instead of aiohttp's `server`)."""
        self._make_handler = server
        return lambda: Connection(self)

    def admit(self, connection: Connection) -> bytes | None:
        """Admit `connection` (its handler built) -> None, or the answer to refuse it with."""
        screened = self.screen(connection.address)
        if screened is not None:
            return screened
        if self._addresses[connection.address] >= self.per_address:
            log.warning(
                "reward server: %s holds %d connections (--max-connections-per-address); answering 503 to another",
                connection.address,
                self.per_address,
            )
            return OVER_QUOTA
        if len(self._open) - len(self._closing) >= self.limit and not self._evict():
            log.warning(
                "reward server: %d connections open, every one inside a request (--max-connections); "
                "answering 503 to a new one",
                self.limit,
            )
            return FULL
        connection.handler = self._make_handler()
        self._open.add(connection)
        self._addresses[connection.address] += 1
        self._fresh[connection] = time.monotonic()
        self._of_handler[connection.handler] = connection
        return None

    def lost(self, connection: Connection) -> None:
        if connection not in self._open:
            return  # a refused one
        self._open.discard(connection)
        self._closing.discard(connection)
        self._addresses[connection.address] -= 1
        if not self._addresses[connection.address]:
            del self._addresses[connection.address]
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)
        self._of_handler.pop(connection.handler, None)

    def request_started(self, handler) -> None:
        connection = self._of_handler.get(handler)
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)

    def request_finished(self, handler) -> None:
        connection = self._of_handler.get(handler)
        if connection is not None and connection not in self._closing:
            self._idle[connection] = time.monotonic()

    def _evict(self) -> bool:
        """Close the oldest fresh connection, else the longest idle one; False when none is left."""
        for order, what in ((self._fresh, "that had sent no request"), (self._idle, "idle")):
            while order:
                connection, _ = order.popitem(last=False)
                if self._close(connection):
                    log.warning(
                        "reward server: %d connections open (--max-connections): closed the oldest one %s",
                        self.limit,
                        what,
                    )
                    return True
        return False

    def _close(self, connection: Connection) -> bool:
        if not connection.close():
            return False
        self._closing.add(connection)
        return True

    async def sweep(self) -> None:
        """Forever: close connections past their header deadline."""
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            self.sweep_once()

    def sweep_once(self) -> None:
        deadline = time.monotonic() - self.header_timeout_s
        late = 0
        while self._fresh and next(iter(self._fresh.values())) < deadline:
            connection, _ = self._fresh.popitem(last=False)
            late += self._close(connection)
        if late:
            log.warning(
                "reward server: closed %d connection(s) that sent no complete request within --header-timeout-s %g",
                late,
                self.header_timeout_s,
            )


def descriptor_problem(max_connections: int) -> str | None:
    """Raise this process's soft file-descriptor limit to fit `max_connections` (up to the hard
    limit, as nginx's worker_rlimit_nofile does); a message when it cannot."""
    needed = max_connections + MAX_LINGERING + DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard == resource.RLIM_INFINITY or hard >= needed:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
            return None
        room = max(hard - MAX_LINGERING - DESCRIPTOR_RESERVE, 1)
        return (
            f"--max-connections {max_connections} needs {needed} file descriptors (with {MAX_LINGERING} for "
            f"refused connections and {DESCRIPTOR_RESERVE} for the process itself) but this process may open at "
            f"most {hard} (ulimit -Hn); lower --max-connections to {room} or raise the limit"
        )
    return None
