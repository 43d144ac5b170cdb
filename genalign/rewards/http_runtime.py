"""HTTP reward runtime: scoring through a `genalign serve-reward` server (reward.runtime=http).

Where it fits: same contract as `LocalRewardRuntime` and `RayRewardRuntime` (composite.py) —
same tensors, same checks, same errors — but the scorers live in a server, possibly on another
machine, shared by several training jobs. A batch is split into chunks of `reward.batch_size`
samples; each chunk is one request carrying every component (`wire.py`: raw uint8 tensors in
safetensors). Requests run on one asyncio event loop in a background thread, so `score_async`
only submits and returns at once; `result()` collects and validates with `check_scores`.

Failure semantics on top of composite.py's:
- every wait is bounded: each attempt of a request is bounded by `reward.timeout_s`; a server
  that does not answer in time is a `RewardError` naming the server and the rewards, never a hang;
- a dropped connection (server killed or restarted, connection reset) is retried once, after
  the server answers its health check again (waited for at most `reward.startup_timeout_s`: a
  restarted judge reloads its model); a second drop is a `RewardError`;
- a busy server (503: its queue is full) is retried with back-off within the same bound;
- a wrong token (401), an oversized request (413), a request the server refuses (400), a
  scorer failure on the server (422) and a reply that is not the documented JSON are each a
  `RewardError` naming the server and the reward(s), with the server's own message.

The server owns its models, so `offload`/`onload` do nothing here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import torch

from genalign.config.errors import UserError
from genalign.rewards.base import RewardError
from genalign.rewards.config import RewardConfig
from genalign.rewards.scores import RewardScores, batch_ranges, check_inputs, check_scores
from genalign.rewards.wire import (
    CONTENT_TYPE,
    HEALTH_PATH,
    INFO_PATH,
    SCORE_PATH,
    ScoreRequest,
    WireError,
    decode_reply,
    encode_request,
    require_aiohttp,
)

log = logging.getLogger(__name__)

BUSY_BACKOFF_S = (0.05, 2.0)
"""First and longest wait between retries of a 503 (busy) answer; doubles in between."""
HEALTH_POLL_S = 0.5
"""How often a dropped connection's health check is repeated while the server is away."""
KEEPALIVE_S = 5.0
"""Longest a pooled connection idles before the client closes it (at most half the server's idle limit)."""
RESUME_HINT = (
    "once the reward server answers again, rerun the same command with trainer.resume_from=auto: "
    "it continues from the last checkpoint"
)
RETRIED_STATUSES = (429, 503)
"""Answers that mean "not now": retried with back-off within reward.timeout_s."""


class RewardServiceError(RewardError, UserError):
    """The reward server is unreachable, refuses, times out or fails a request: one line naming
    the server and the rewards (the CLI prints it without a traceback)."""

    def __init__(self, message: str, hint: str | None = None):
        UserError.__init__(self, message, hint)  # RuntimeError's own __init__ would skip the hint


@dataclass
class HttpChunk:
    start: int
    end: int
    future: Future
    """Resolves to {component: float32 [end - start]} or raises RewardError."""


class HttpScoresFuture:
    """What `score_async` returns: submitted requests; `result()` gathers and validates."""

    def __init__(self, runtime: "HttpRewardRuntime", prompts: list[str], chunks: list[HttpChunk]):
        self.runtime = runtime
        self.prompts = prompts
        self.chunks = chunks

    def done(self) -> bool:
        return all(chunk.future.done() for chunk in self.chunks)

    def result(self) -> RewardScores:
        parts: dict[str, list[torch.Tensor]] = {name: [] for name in self.runtime.weights}
        for chunk in self.chunks:
            try:
                # the request bounds itself; this outer bound only guards against a bug in that
                scores = chunk.future.result(timeout=self.runtime.worst_case_s)
            except FutureTimeout as exc:
                chunk.future.cancel()
                raise RewardServiceError(
                    f"{self.runtime.describe()}: no answer for samples [{chunk.start}, "
                    f"{chunk.end}) within {self.runtime.worst_case_s:.0f}s"
                ) from exc
            for name in parts:
                parts[name].append(check_scores(name, scores[name], self.prompts[chunk.start : chunk.end], chunk.start))
        return RewardScores(
            {name: torch.cat(chunks) for name, chunks in parts.items()},  # [B] each
            dict(self.runtime.weights),
        )


class _ClientThread:
    """The runtime's event loop, on a daemon thread, and its aiohttp session. Closed by the
    runtime's `close()`, or by a `weakref.finalize` when the runtime is garbage-collected or the
    interpreter exits: a trainer that fails while building its other parts leaves no unclosed
    session (aiohttp's "Unclosed client session" error) behind."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="genalign-reward-http", daemon=True)
        self.thread.start()
        self.session = None

    async def drop_session(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            await session.close()

    async def shutdown(self) -> None:
        """Cancel the requests still running (a caller that gave up on them), then close the session."""
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self.drop_session()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.shutdown(), self.loop).result(timeout=30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
        if not self.thread.is_alive():
            self.loop.close()


class HttpRewardRuntime:
    """Scores through the reward server at `reward.url`; same results as LocalRewardRuntime."""

    def __init__(self, cfg: RewardConfig, weights: dict[str, float]):
        require_aiohttp()
        problems = cfg.http_problems()
        for key in ("timeout_s", "startup_timeout_s"):
            if getattr(cfg, key) <= 0:
                problems.append(f"reward.{key}={getattr(cfg, key)} must be > 0")
        if problems:
            raise ValueError("; ".join(problems))
        self.cfg = cfg
        self.weights = weights
        self.url = cfg.url.rstrip("/")
        token = os.environ.get(cfg.token_env, "")
        if not token:
            raise RewardServiceError(
                f"reward.runtime=http: ${cfg.token_env} is not set; export the reward server's "
                f"token in the trainer's environment (reward.token_env names the variable)"
            )
        self._headers = {"Authorization": f"Bearer {token}"}
        # a request may be tried twice, with a wait for the server in between
        self.worst_case_s = 2 * cfg.timeout_s + cfg.startup_timeout_s + 30.0
        self._io = _ClientThread()
        self._finalizer = weakref.finalize(self, self._io.close)  # also when an owner fails before close()
        self._keepalive_s = KEEPALIVE_S
        try:
            info = self._run(self._fetch_info(), cfg.startup_timeout_s + 5.0)
        except BaseException:
            self.close()
            raise
        missing = [name for name in weights if name not in info.get("components", [])]
        if missing:
            self.close()
            raise RewardServiceError(
                f"reward server {self.url} does not serve reward(s) {missing} (it serves "
                f"{info.get('components')}); start it with `genalign serve-reward --components "
                f"{' '.join(weights)}`"
            )
        self.max_request_bytes = int(info.get("max_request_bytes", 0)) or None
        idle_s = info.get("idle_timeout_s")
        if isinstance(idle_s, (int, float)) and idle_s > 0 and idle_s / 2 < self._keepalive_s:
            self._keepalive_s = idle_s / 2
            self._run(self._io.drop_session(), 30.0)  # the next request opens a pool with the shorter keep-alive

    # -- public contract ------------------------------------------------------------------------------

    def describe(self, names: list[str] | None = None) -> str:
        names = list(self.weights) if names is None else names
        return f"reward(s) {', '.join(repr(n) for n in names)} on reward server {self.url}"

    def score_async(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> HttpScoresFuture:
        metadata = check_inputs(images, prompts, metadata)
        images = images.cpu()
        chunks = []
        for start, end in batch_ranges(len(prompts), self.cfg.batch_size):
            request = ScoreRequest(images[start:end], prompts[start:end], metadata[start:end], list(self.weights))
            where = f"samples [{start}, {end}) of {len(prompts)}"
            future = asyncio.run_coroutine_threadsafe(self._score_chunk(request, where), self._io.loop)
            chunks.append(HttpChunk(start, end, future))
        return HttpScoresFuture(self, prompts, chunks)

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> RewardScores:
        return self.score_async(images, prompts, metadata).result()

    def offload(self) -> None:
        """The server owns its models; nothing moves here."""

    def onload(self) -> None:
        """The server owns its models; nothing moves here."""

    def close(self) -> None:
        """Close the connections and stop the event loop thread (idempotent)."""
        self._finalizer()

    # -- on the event loop --------------------------------------------------------------------------

    def _run(self, coroutine, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._io.loop)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout as exc:
            future.cancel()
            raise RewardServiceError(f"{self.describe()}: no answer within {timeout:.0f}s") from exc

    def _ensure_session(self):
        import aiohttp

        if self._io.session is None:
            connector = aiohttp.TCPConnector(keepalive_timeout=self._keepalive_s)
            self._io.session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._io.session

    async def _fetch_info(self) -> dict[str, Any]:
        """GET /v1/info once the server is up (waited for at most reward.startup_timeout_s)."""
        await self._wait_for_server(self.cfg.startup_timeout_s, "reach")
        status, body, _ = await self._request("GET", INFO_PATH, None, self.cfg.timeout_s)
        return self._parse(status, body, list(self.weights), "start-up")

    async def _wait_for_server(self, budget_s: float, what: str) -> None:
        """Poll /healthz until it answers 200, at most budget_s; else a RewardError."""
        import aiohttp

        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget_s
        last: Exception | str = "no answer"
        while True:
            try:
                status, _, _ = await self._request("GET", HEALTH_PATH, None, min(5.0, budget_s))
                if status == 200:
                    return
                last = f"HTTP {status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = exc
            if loop.time() >= deadline:
                seen = f"{type(last).__name__}: {last}" if isinstance(last, Exception) else last
                raise RewardServiceError(
                    f"{self.describe()}: cannot {what} the server within reward.startup_timeout_s="
                    f"{self.cfg.startup_timeout_s} (last: {seen}); is `genalign serve-reward` "
                    f"running at that address?",
                    hint=RESUME_HINT,
                )
            await asyncio.sleep(min(HEALTH_POLL_S, max(deadline - loop.time(), 0.0)))

    async def _request(
        self, method: str, path: str, body: bytes | None, timeout_s: float
    ) -> tuple[int, bytes, float | None]:
        """(status, body, the Retry-After seconds when the server sent a number)."""
        import aiohttp

        session = self._ensure_session()
        headers = {"Content-Type": CONTENT_TYPE} if body is not None else None
        async with session.request(
            method, self.url + path, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            retry_after = response.headers.get("Retry-After", "")
            return (response.status, await response.read(), float(retry_after) if retry_after.isdigit() else None)

    async def _score_chunk(self, request: ScoreRequest, where: str) -> dict[str, torch.Tensor]:
        """One chunk: encode, send (retry once on a dropped connection), decode."""
        import aiohttp

        names = request.components
        try:
            body = encode_request(request)
        except WireError as exc:
            raise RewardServiceError(f"{self.describe(names)}: cannot send {where}: {exc}") from exc
        if self.max_request_bytes is not None and len(body) > self.max_request_bytes:
            raise RewardServiceError(
                f"{self.describe(names)}: {where} is a {len(body) / 2**20:.1f} MiB request; the "
                f"server accepts at most {self.max_request_bytes / 2**20:.1f} MiB (its "
                f"--max-request-mb). Lower reward.batch_size or raise the server's limit"
            )
        for attempt in (1, 2):
            try:
                status, reply = await self._send_until_accepted(body, where, names)
                return self._parse(status, reply, names, where, count=len(request.prompts))
            except asyncio.TimeoutError as exc:  # before ClientError: aiohttp's timeouts are both
                raise RewardServiceError(
                    f"{self.describe(names)}: no answer for {where} within reward.timeout_s="
                    f"{self.cfg.timeout_s}; raise reward.timeout_s or check the server's "
                    "load"
                ) from exc
            except aiohttp.ClientConnectionError as exc:
                if attempt == 2:
                    raise RewardServiceError(
                        f"{self.describe(names)}: the connection dropped again while scoring "
                        f"{where} after one retry; giving up: {type(exc).__name__}: "
                        f"{exc}"
                    ) from exc
                log.warning(
                    "%s: connection dropped while scoring %s (%s: %s); retrying once when the server answers again",
                    self.describe(names),
                    where,
                    type(exc).__name__,
                    exc,
                )
                await self._wait_for_server(self.cfg.startup_timeout_s, "reconnect to")
        raise AssertionError("unreachable")

    async def _send_until_accepted(self, body: bytes, where: str, names: list[str]) -> tuple[int, bytes]:
        """POST within reward.timeout_s; a 503 (busy) or 429 (throttled) is retried with back-off
        inside that bound (a 429's Retry-After, when it fits, is waited for instead)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.timeout_s
        backoff = BUSY_BACKOFF_S[0]
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise asyncio.TimeoutError(f"server busy (503) throughout {where}")
            status, reply, retry_after = await self._request("POST", SCORE_PATH, body, remaining)
            if status not in RETRIED_STATUSES:
                return status, reply
            wait_s = retry_after if retry_after is not None else backoff
            await asyncio.sleep(min(wait_s, max(deadline - loop.time(), 0.0)))
            backoff = min(2 * backoff, BUSY_BACKOFF_S[1])

    def _parse(self, status: int, body: bytes, names: list[str], where: str, count: int | None = None) -> Any:
        """A reply -> its JSON (count None: /v1/info) or {name: scores}; anything else a RewardError."""
        try:
            reply = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            reply = None
        message = reply.get("error") if isinstance(reply, dict) else None
        if status != 200:
            hint = {
                401: f"; the token in ${self.cfg.token_env} does not match the server's",
                408: "; the network is slower than the server's --body-timeout-s allows: lower "
                "reward.batch_size or raise it",
                413: "; lower reward.batch_size or raise the server's --max-request-mb",
            }.get(status, "")
            detail = message or body[:200].decode(errors="replace")
            raise RewardServiceError(f"{self.describe(names)}: HTTP {status} for {where}: {detail}{hint}")
        if reply is None:
            raise RewardServiceError(f"{self.describe(names)}: the reply for {where} is not JSON: {body[:200]!r}")
        if count is None:
            if not isinstance(reply, dict):
                raise RewardServiceError(
                    f"{self.describe(names)}: the {where} reply is not a JSON object: {body[:200]!r}"
                )
            return reply
        try:
            return decode_reply(reply, names, count)
        except WireError as exc:
            raise RewardServiceError(f"{self.describe(names)}: malformed reply for {where}: {exc}") from exc
