"""Ray reward runtime: each scorer in a pool of Ray actors (reward.runtime=ray).

Where it fits: same contract as `LocalRewardRuntime` (composite.py) — same tensors, same
errors — but scoring runs in `reward.num_workers` actors per component, each holding its own
scorer on `num_cpus_per_worker`/`num_gpus_per_worker`. A batch is split into chunks of
`reward.batch_size` dealt round-robin over the pool. `score_async` only submits (Ray
ObjectRefs) and returns at once, so the trainer can score finished rollout chunks while the
next chunk generates; `result()` collects.

Failure semantics on top of composite.py's:
- a dead actor (crash, OOM kill, `ray.kill`) is restarted once and its chunks resubmitted; a
  second death of the same chunk's actor is a `RewardError` naming the reward and the actor;
- every wait is bounded: a chunk that has not answered within `reward.timeout_s` (counted from
  the start of `result()`, afresh for a retried chunk) is a `RewardError`, never a hang;
- a scorer exception comes back as a `RewardError` chained to the scorer's own exception.

Ray start-up: joins `RAY_ADDRESS` when set, else starts a local Ray bound to loopback with the
dashboard off (`genalign.ray_session`). We never start, manage or shut down a cluster we joined.
Actor start-up (building a scorer can mean loading a model for minutes) is bounded by its own
`reward.startup_timeout_s`, never by the per-call `reward.timeout_s`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from genalign.ray_session import init_ray
from genalign.rewards import base
from genalign.rewards.base import RewardError
from genalign.rewards.config import RewardConfig
from genalign.rewards.scores import RewardScores, batch_ranges, build_scorer, check_inputs, check_scores
from genalign.rewards.video import score_media

log = logging.getLogger(__name__)


def ensure_ray(cpus_needed: float) -> None:
    """ray.init once: RAY_ADDRESS when set, otherwise a local instance with enough logical CPUs."""
    import ray

    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS") or None
    num_cpus = None if address else max(os.cpu_count() or 1, math.ceil(cpus_needed))
    log.info("reward runtime: ray.init(address=%s, num_cpus=%s)", address, num_cpus)
    init_ray(address, num_cpus=num_cpus, log_to_driver=True)


class RewardWorker:
    """The actor body: one scorer, built inside the actor's process on the actor's device."""

    def __init__(
        self,
        name: str,
        device: str,
        kwargs: dict[str, Any],
        allow_import: list[str],
        video_reduction: str = "mean",
        frame_batch_size: int = 16,
    ):
        self.scorer = build_scorer(name, device, kwargs, allow_import)
        self.video_reduction = video_reduction
        self.frame_batch_size = frame_batch_size

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """Images, or video scored per frame (`rewards/video.py`, reward.video_reduction)."""
        return score_media(self.scorer, images, prompts, metadata, self.video_reduction, self.frame_batch_size)

    def offload(self) -> None:
        base.offload(self.scorer)  # optional on a scorer (rewards/base.py)

    def onload(self) -> None:
        base.onload(self.scorer)

    def ready(self) -> bool:
        return True


class RewardPool:
    """`num_workers` actors for one component; slot k's actor can be replaced after it dies."""

    def __init__(self, name: str, cfg: RewardConfig):
        import ray

        self.name = name
        self.cfg = cfg
        self.device = "cuda" if cfg.num_gpus_per_worker > 0 else "cpu"
        self._actor_cls = ray.remote(RewardWorker).options(
            num_cpus=cfg.num_cpus_per_worker, num_gpus=cfg.num_gpus_per_worker, max_restarts=0
        )
        self.actors = [self._spawn() for _ in range(cfg.num_workers)]
        try:
            self.wait([actor.ready.remote() for actor in self.actors], "start", startup=True)
        except RewardError:
            self.kill()  # no actor outlives a failed start
            raise

    def _spawn(self):
        return self._actor_cls.remote(
            self.name,
            self.device,
            dict(self.cfg.kwargs.get(self.name, {})),
            list(self.cfg.allow_import),
            self.cfg.video_reduction,
            self.cfg.batch_size,
        )

    def describe(self, slot: int) -> str:
        actor = self.actors[slot]
        return f"reward {self.name!r} actor {slot} (id {actor._actor_id.hex()[:12]})"

    def restart(self, slot: int) -> None:
        import ray

        log.warning("%s died; restarting it once and retrying its chunks", self.describe(slot))
        ray.kill(self.actors[slot], no_restart=True)
        self.actors[slot] = self._spawn()
        # the replacement builds its scorer first; that must not eat the retried chunk's time
        self.wait([self.actors[slot].ready.remote()], f"restart of actor {slot}", startup=True)

    def wait(self, refs: list, what: str, startup: bool = False) -> list:
        """ray.get bounded by reward.timeout_s (reward.startup_timeout_s while actors start); a
        miss or a death is a RewardError naming the pool."""
        import ray

        key, timeout = (
            ("startup_timeout_s", self.cfg.startup_timeout_s) if startup else ("timeout_s", self.cfg.timeout_s)
        )
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise RewardError(
                f"reward {self.name!r}: {what} did not finish within reward.{key}={timeout}; "
                f"raise reward.{key} or check the actor's log"
            ) from exc
        except ray.exceptions.RayActorError as exc:
            raise RewardError(f"reward {self.name!r}: an actor died during {what}: {exc}") from exc

    def kill(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []


@dataclass
class Chunk:
    """One submitted call: samples [start, end) of the batch on pool slot `slot`."""

    name: str
    start: int
    end: int
    slot: int
    actor: Any
    """The actor handle it was submitted to (to tell whether the slot was restarted since)."""
    ref: Any
    retried: bool = False


class RayScoresFuture:
    """What `score_async` returns: submitted chunks; `result()` gathers, retries, validates."""

    def __init__(
        self,
        runtime: "RayRewardRuntime",
        images: torch.Tensor,
        prompts: list[str],
        metadata: list[dict[str, Any]],
        chunks: list[Chunk],
    ):
        self.runtime = runtime
        self.images = images
        self.prompts = prompts
        self.metadata = metadata
        self.chunks = chunks

    def done(self) -> bool:
        import ray

        ready, _ = ray.wait([chunk.ref for chunk in self.chunks], num_returns=len(self.chunks), timeout=0)
        return len(ready) == len(self.chunks)

    def result(self) -> RewardScores:
        deadline = time.monotonic() + self.runtime.cfg.timeout_s
        parts: dict[str, list[torch.Tensor]] = {name: [] for name in self.runtime.weights}
        for chunk in self.chunks:
            raw = self._get(chunk, deadline)
            parts[chunk.name].append(check_scores(chunk.name, raw, self.prompts[chunk.start : chunk.end], chunk.start))
        components = {name: torch.cat(chunks) for name, chunks in parts.items()}  # [B] each
        return RewardScores(components, dict(self.runtime.weights))

    def _get(self, chunk: Chunk, deadline: float) -> Any:
        import ray

        pool = self.runtime.pools[chunk.name]
        where = f"samples [{chunk.start}, {chunk.end}) of {len(self.prompts)}"
        try:
            return ray.get(chunk.ref, timeout=max(deadline - time.monotonic(), 0.0))
        except ray.exceptions.GetTimeoutError as exc:
            raise RewardError(
                f"{pool.describe(chunk.slot)} did not score {where} within reward.timeout_s="
                f"{self.runtime.cfg.timeout_s}s; raise reward.timeout_s or check the actor's "
                f"log"
            ) from exc
        except ray.exceptions.RayActorError as exc:
            if chunk.retried:
                raise RewardError(
                    f"{pool.describe(chunk.slot)} died again while scoring {where} after one restart; giving up: {exc}"
                ) from exc
            if pool.actors[chunk.slot] is chunk.actor:  # not yet restarted by an earlier chunk
                pool.restart(chunk.slot)
            self.runtime.resubmit(chunk, self.images, self.prompts, self.metadata)
            return self._get(chunk, time.monotonic() + self.runtime.cfg.timeout_s)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.as_instanceof_cause()
            raise RewardError(
                f"reward {chunk.name!r} failed on {where} ({pool.describe(chunk.slot)}): "
                f"{type(cause).__name__}: {cause}"
            ) from cause


class RayRewardRuntime:
    """A pool of reward actors per component; same results as LocalRewardRuntime."""

    def __init__(self, cfg: RewardConfig, weights: dict[str, float]):
        if cfg.num_workers < 1:
            raise ValueError(f"reward.num_workers={cfg.num_workers} must be >= 1 with reward.runtime=ray")
        for key in ("timeout_s", "startup_timeout_s"):
            if getattr(cfg, key) <= 0:
                raise ValueError(f"reward.{key}={getattr(cfg, key)} must be > 0")
        self.cfg = cfg
        self.weights = weights
        ensure_ray(cfg.num_cpus_per_worker * cfg.num_workers * len(weights))
        self.pools = {name: RewardPool(name, cfg) for name in weights}

    def submit(
        self,
        name: str,
        slot: int,
        images: torch.Tensor,
        prompts: list[str],
        metadata: list[dict[str, Any]],
        start: int,
        end: int,
    ) -> tuple[Any, Any]:
        actor = self.pools[name].actors[slot]
        ref = actor.score.remote(images[start:end].contiguous(), prompts[start:end], metadata[start:end])
        return actor, ref

    def resubmit(self, chunk: Chunk, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> None:
        chunk.actor, chunk.ref = self.submit(chunk.name, chunk.slot, images, prompts, metadata, chunk.start, chunk.end)
        chunk.retried = True

    def score_async(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> RayScoresFuture:
        metadata = check_inputs(images, prompts, metadata)
        images = images.cpu()
        chunks = []
        for name in self.weights:
            for index, (start, end) in enumerate(batch_ranges(len(prompts), self.cfg.batch_size)):
                slot = index % self.cfg.num_workers
                actor, ref = self.submit(name, slot, images, prompts, metadata, start, end)
                chunks.append(Chunk(name, start, end, slot, actor, ref))
        return RayScoresFuture(self, images, prompts, metadata, chunks)

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> RewardScores:
        return self.score_async(images, prompts, metadata).result()

    def _broadcast(self, method: str) -> None:
        for pool in self.pools.values():
            pool.wait([getattr(actor, method).remote() for actor in pool.actors], method)

    def offload(self) -> None:
        self._broadcast("offload")

    def onload(self) -> None:
        self._broadcast("onload")

    def close(self) -> None:
        for pool in self.pools.values():
            pool.kill()
        self.pools = {}
