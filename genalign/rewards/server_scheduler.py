"""The reward server's scheduler: every request cut into scorer calls of `reward.batch_size`
samples, the calls shared fairly between clients.

Where it fits: `server.py`'s score handler decodes a request and `submit`s it as a `Job`, then
awaits the job's future; one task (`run`) builds each scorer call from the waiting jobs and
runs it on the server's single scoring thread (the scorers see one call at a time, as
in-process). A client that disconnects has its handler cancelled (aiohttp's
`handler_cancellation`), which `discard`s its job: samples not yet handed to a scorer are never
scored.

Why split and share: a request is bounded only by the body size (`--max-request-mb`), so one
client could send tens of thousands of images. Scored as one call, it would hold the scoring
thread for minutes while every other trainer waits. Here no call is larger than the server's
`reward.batch_size`, and calls rotate between clients (keyed by peer address): the client that
led one call goes to the back of the line, so a small request waits for at most one call of
each other client before its own samples are scored. Pieces of several jobs (of one client or
several) with the same components and media shape share a call up to the batch size, as the
server merged consecutive small requests before.

A scorer failure on a shared call is retried piece by piece, so one client's bad sample fails
only that client's request (422 with the scorer's message).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Callable

import torch

from genalign.rewards.base import RewardError
from genalign.rewards.wire import ScoreRequest

log = logging.getLogger(__name__)

Scores = dict[str, torch.Tensor]
"""{component: float32 [n]} for the n samples of a request or piece."""


@dataclass(frozen=True)
class JobError:
    """Why a job ended without scores: the HTTP status the handler answers with, and the message."""

    status: int
    message: str


class QueueFull(Exception):
    """`submit` refused a job (the handler answers 503 with this message)."""


@dataclass(eq=False)
class Job:
    """One request: its samples are handed to scorer calls in order, [0, handed_out)."""

    client: str
    request: ScoreRequest
    future: asyncio.Future = field(repr=False)
    """Resolves to `Scores` for the whole request or a `JobError`."""
    handed_out: int = 0
    scored: int = 0
    parts: dict[str, list[torch.Tensor]] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return len(self.request.prompts)

    @property
    def waiting(self) -> int:
        return self.size - self.handed_out


@dataclass(frozen=True)
class Piece:
    """Samples [start, end) of a job, in one scorer call."""

    job: Job
    start: int
    end: int

    def request(self) -> ScoreRequest:
        r = self.job.request
        return ScoreRequest(
            r.images[self.start : self.end],
            r.prompts[self.start : self.end],
            r.metadata[self.start : self.end],
            r.components,
        )


def mergeable(a: ScoreRequest, b: ScoreRequest) -> bool:
    """Whether two requests' samples can share one scorer call."""
    return a.components == b.components and a.images.shape[1:] == b.images.shape[1:]


class FairScheduler:
    """Jobs per client, scorer calls of at most `batch_size` samples taken round-robin."""

    def __init__(self, score: Callable[[ScoreRequest], Scores], executor: Executor, batch_size: int, max_jobs: int):
        self._score = score
        """Scores one request on the scoring thread; raises RewardError/ValueError on a scorer failure."""
        self._executor = executor
        self.batch_size = batch_size
        self.max_jobs = max_jobs
        self.max_jobs_per_client = max(1, max_jobs // 2)
        """One client (address) holds at most half the queue, so it cannot fill it alone."""
        self._clients: OrderedDict[str, deque[Job]] = OrderedDict()
        """Jobs with samples not yet handed out, per client; the first client leads the next call."""
        self._unfinished: set[Job] = set()
        """Jobs whose future is not done: waiting, or in the call being scored."""
        self._wakeup: asyncio.Event | None = None

    # -- the handler's side ------------------------------------------------------------------------

    def submit(self, client: str, request: ScoreRequest) -> Job:
        if len(self._unfinished) >= self.max_jobs:
            raise QueueFull(f"busy: {self.max_jobs} requests already wait (--max-queue)")
        if sum(job.client == client for job in self._unfinished) >= self.max_jobs_per_client:
            raise QueueFull(
                f"busy: this client already has {self.max_jobs_per_client} requests waiting (half of "
                f"--max-queue {self.max_jobs})"
            )
        job = Job(client, request, asyncio.get_running_loop().create_future())
        self._unfinished.add(job)
        job.future.add_done_callback(lambda _: self._unfinished.discard(job))
        self._clients.setdefault(client, deque()).append(job)
        self._wake()
        return job

    def discard(self, job: Job) -> None:
        """The client is gone (or the job ended): hand none of its remaining samples to a scorer."""
        self._unqueue(job)
        if not job.future.done():
            job.future.cancel()

    def fail_all(self, error: JobError) -> None:
        """Shutting down: every unfinished job ends with `error`, also those in the call being
        scored (the call itself finishes on the scoring thread; its scores are dropped)."""
        self._clients.clear()
        for job in list(self._unfinished):
            if not job.future.done():
                job.future.set_result(error)

    # -- the scoring loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        while True:
            pieces = self.next_call()
            if not pieces:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                outcomes = await loop.run_in_executor(self._executor, self._score_pieces, pieces)
            except Exception as exc:  # noqa: BLE001 - a bug here must answer the clients, not kill the loop
                log.exception("reward server: scoring a batch failed")
                outcomes = [JobError(500, f"reward server error: {type(exc).__name__}: {exc}")] * len(pieces)
            for piece, outcome in zip(pieces, outcomes):
                self._deliver(piece, outcome)

    def next_call(self) -> list[Piece]:
        """The pieces of the next scorer call, up to `batch_size` samples that share the first
        piece's components and shape: clients visited in turn, each client's jobs in turn. A
        client (and a job) that added samples goes to the back of its line, so the next call
        starts with the others."""
        pieces: list[Piece] = []
        room = self.batch_size
        for client in list(self._clients):
            queue = self._clients[client]
            added: list[Job] = []
            for job in list(queue):
                if job.future.done():  # discarded or failed while it waited
                    queue.remove(job)
                elif room and (not pieces or mergeable(pieces[0].job.request, job.request)):
                    take = min(job.waiting, room)
                    pieces.append(Piece(job, job.handed_out, job.handed_out + take))
                    job.handed_out += take
                    room -= take
                    queue.remove(job)
                    added.append(job)
            queue.extend(job for job in added if job.waiting)  # its samples not yet handed out, at the back
            if not queue:
                del self._clients[client]
            elif added:
                self._clients.move_to_end(client)
            if not room:
                break
        return pieces

    def _score_pieces(self, pieces: list[Piece]) -> list[Scores | JobError]:
        """On the scoring thread: one call for all pieces; on a scorer failure, piece by piece."""
        if len(pieces) > 1:
            requests = [piece.request() for piece in pieces]
            try:
                merged = self._score(
                    ScoreRequest(
                        torch.cat([r.images for r in requests]),
                        [p for r in requests for p in r.prompts],
                        [m for r in requests for m in r.metadata],
                        requests[0].components,
                    )
                )
            except (RewardError, ValueError):
                return [self._score_or_error(piece) for piece in pieces]  # only the faulty request fails
            offsets = [0]
            for r in requests:
                offsets.append(offsets[-1] + len(r.prompts))
            return [{name: values[a:b] for name, values in merged.items()} for a, b in zip(offsets, offsets[1:])]
        return [self._score_or_error(pieces[0])]

    def _score_or_error(self, piece: Piece) -> Scores | JobError:
        try:
            return self._score(piece.request())
        except (RewardError, ValueError) as exc:
            where = (
                ""
                if piece.end - piece.start == piece.job.size
                else f"samples [{piece.start}, {piece.end}) of the request's {piece.job.size}: "
            )
            return JobError(422, where + str(exc))

    def _deliver(self, piece: Piece, outcome: Scores | JobError) -> None:
        job = piece.job
        if job.future.done():  # the client went away, or an earlier piece failed
            return
        if isinstance(outcome, JobError):
            self._unqueue(job)  # its other samples are not scored
            job.future.set_result(outcome)
            return
        for name, values in outcome.items():
            job.parts.setdefault(name, []).append(values)
        job.scored += piece.end - piece.start
        if job.scored == job.size:
            job.future.set_result({name: torch.cat(parts) for name, parts in job.parts.items()})  # [n] each

    def _unqueue(self, job: Job) -> None:
        queue = self._clients.get(job.client)
        if queue is not None and job in queue:
            queue.remove(job)
            if not queue:
                del self._clients[job.client]

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
