"""Reward composition and failure semantics; the in-process reward runtime.

Where it fits: after a rollout the trainer (and the evaluator) calls
`runtime.score(images, prompts, metadata)` and gets `RewardScores`: one raw score tensor per
weighted component plus the weights. How components become advantages (weighted sum, then
one group normalisation, or per-component normalisation) is the algorithms package's job;
this module only guarantees the scores are complete and finite.

Failure semantics (the same for the local, the Ray and the HTTP runtime):
- zero-weight components are never constructed (their models are not loaded) and do not appear;
- a score tensor of the wrong shape, or a NaN/inf score, is a `RewardError` naming the reward,
  the sample index and its prompt — never a silent zero;
- a scorer that raises surfaces as a `RewardError` naming the reward and the batch range,
  chained (`from`) to the scorer's own exception.

`score_async` (reward.async_scoring) returns a future at once; every error above is raised
from its `result()`, when the trainer collects the step's scores, never at submission.
"""

from __future__ import annotations

import contextlib
import math
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Protocol, get_args

import torch

from genalign.rewards import base
from genalign.rewards.base import RewardError, RewardFunction
from genalign.rewards.config import RewardConfig, RewardRuntimeName, active_weights
from genalign.rewards.http_runtime import HttpRewardRuntime
from genalign.rewards.ray_runtime import RayRewardRuntime
from genalign.rewards.registry import REWARDS
from genalign.rewards.scores import RewardScores, batch_ranges, build_scorer, check_inputs, check_scores
from genalign.rewards.video import VIDEO_REDUCTIONS, score_media

RUNTIMES = get_args(RewardRuntimeName)


def weights_to_build(cfg: RewardConfig, components: dict[str, float] | None) -> dict[str, float]:
    """The active weights of `components` (default cfg.components); a config error lists every
    problem: the names, the weights and the block's own (`RewardConfig.problems`). The choices
    are checked again for a config built in code (the loader checks them in a YAML one)."""
    weights = dict(cfg.components if components is None else components)
    problems = [REWARDS.check(name, cfg.allow_import) for name in weights]
    problems = [problem for problem in problems if problem]
    problems += [
        f"reward.components.{name}={weight!r} is not a finite number"
        for name, weight in weights.items()
        if not isinstance(weight, (int, float)) or not math.isfinite(weight)
    ]
    if cfg.runtime not in RUNTIMES:
        problems.append(f"reward.runtime={cfg.runtime!r} is not supported; choose one of {', '.join(RUNTIMES)}")
    if cfg.video_reduction not in VIDEO_REDUCTIONS:
        problems.append(f"reward.video_reduction={cfg.video_reduction!r}: choose one of {', '.join(VIDEO_REDUCTIONS)}")
    problems += cfg.problems()
    if problems:
        raise ValueError("invalid reward config:\n  " + "\n  ".join(problems))
    active = {name: float(weight) for name, weight in active_weights(weights).items()}
    if not active:
        raise ValueError(
            f"reward.components: no component has a non-zero weight ({weights}); "
            f"set at least one, e.g. reward.components.ocr=1.0"
        )
    return active


class ScoresFuture(Protocol):
    def result(self) -> RewardScores: ...


class RewardRuntime(Protocol):
    """Scores batches with weighted components; implemented by LocalRewardRuntime, RayRewardRuntime
    and HttpRewardRuntime."""

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> RewardScores: ...

    def score_async(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> ScoresFuture: ...

    def offload(self) -> None: ...

    def onload(self) -> None: ...

    def close(self) -> None: ...


def in_caller_context(fn: Callable[..., RewardScores]) -> Callable[..., RewardScores]:
    """`fn`, to run on a worker thread with the calling thread's thread-local torch state.

    Grad mode and the current CUDA device are per thread in PyTorch: a fresh worker thread
    would otherwise score with grad enabled on cuda:0 whatever the caller had set."""
    grad_enabled = torch.is_grad_enabled()
    cuda_device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def run(*args: Any) -> RewardScores:
        device = torch.cuda.device(cuda_device) if cuda_device is not None else contextlib.nullcontext()
        with torch.set_grad_enabled(grad_enabled), device:
            return fn(*args)

    return run


class LocalRewardRuntime:
    """Every scorer in this process, called in chunks of `batch_size` images.

    `score` runs in the caller's thread. `score_async` hands the same `score` call to a pool of
    `num_threads` worker threads and returns a `concurrent.futures.Future` at once, as
    Flow-GRPO's `train_sd3.py` does with its ThreadPoolExecutor: the trainer submits each
    finished rollout chunk and samples the next one while it is scored. What overlaps is the
    Python/CPU side of scoring (image conversion, OCR, JPEG encoding, tokenisation, CPU
    models); GPU kernels of both threads still queue on the device one after another.

    Why one worker thread by default: it calls the scorers one chunk at a time in submission
    order, exactly the calls serial scoring makes, so a reward model on the GPU is never run by
    two threads at once and a scorer with state (the `random` reward counts its calls) sees the
    same sequence. With more threads the same scorer runs on several chunks at once, in no
    fixed order: only for thread-safe, order-free scorers (rule rewards, a remote service;
    Flow-GRPO uses 8 threads).

    Bit-identical to serial scoring: each worker thread runs with the torch intra-op thread
    count the process had when the pool started. PyTorch's count is process-wide but OpenMP's
    is per thread; setting it explicitly makes a CPU scorer split its work (and so its float
    reductions) exactly as on the main thread. Sampling and scoring then share the cores, which
    slows each down when both are CPU-bound but does not change a result.

    Offload: a scorer is never moved while a thread scores with it (`offload`/`onload` first
    wait for submitted work), and `score_async` on an offloaded runtime is an error: the
    trainer's async path keeps reward models resident during sampling, since that is when they score.
    """

    def __init__(
        self,
        scorers: dict[str, RewardFunction],
        weights: dict[str, float],
        batch_size: int,
        num_threads: int = 1,
        video_reduction: str = "mean",
    ):
        self.scorers = scorers
        self.video_reduction = video_reduction
        self.weights = weights
        self.batch_size = batch_size
        self.num_threads = num_threads
        self.offloaded = False
        self._pool: ThreadPoolExecutor | None = None  # started by the first score_async
        self._pending: set[Future] = set()

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> RewardScores:
        metadata = check_inputs(images, prompts, metadata)
        components = {}
        for name, scorer in self.scorers.items():
            chunks = []
            for start, end in batch_ranges(len(prompts), self.batch_size):
                try:
                    raw = score_media(
                        scorer,
                        images[start:end],
                        prompts[start:end],
                        metadata[start:end],
                        self.video_reduction,
                        self.batch_size,
                    )
                except Exception as exc:
                    raise RewardError(
                        f"reward {name!r} failed on samples [{start}, {end}) of {len(prompts)}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                chunks.append(check_scores(name, raw, prompts[start:end], start))
            components[name] = torch.cat(chunks)  # [B]
        return RewardScores(components, dict(self.weights))

    def score_async(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]
    ) -> Future[RewardScores]:
        """`score` on a worker thread; its RewardError/ValueError is raised from `result()`."""
        if self.offloaded:
            raise RuntimeError(
                "LocalRewardRuntime.score_async after offload(): call onload() first; "
                "reward.async_scoring keeps reward models resident while sampling"
            )
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.num_threads,
                thread_name_prefix="genalign-reward",
                initializer=torch.set_num_threads,
                initargs=(torch.get_num_threads(),),
            )
        future = self._pool.submit(in_caller_context(self.score), images, prompts, metadata)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def wait_idle(self) -> None:
        """Block until every submitted `score_async` has finished (its errors stay in its future)."""
        wait(list(self._pending))

    def offload(self) -> None:
        self.wait_idle()
        for scorer in self.scorers.values():
            base.offload(scorer)  # optional on a scorer (rewards/base.py)
        self.offloaded = True

    def onload(self) -> None:
        self.wait_idle()
        for scorer in self.scorers.values():
            base.onload(scorer)
        self.offloaded = False

    def close(self) -> None:
        """Finish submitted work, stop the worker threads, release the scorers."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.offload()
        self.scorers = {}


def build_reward_runtime(
    cfg: RewardConfig, device: torch.device | str, components: dict[str, float] | None = None
) -> RewardRuntime:
    """The runtime for `components` (default cfg.components; eval gold rewards pass their own).

    Constructor kwargs always come from cfg.kwargs[name]; zero-weight components are skipped."""
    weights = weights_to_build(cfg, components)
    if cfg.runtime == "ray":
        return RayRewardRuntime(cfg, weights)
    if cfg.runtime == "http":
        return HttpRewardRuntime(cfg, weights)
    scorers = {
        name: build_scorer(name, str(device), dict(cfg.kwargs.get(name, {})), cfg.allow_import) for name in weights
    }
    return LocalRewardRuntime(scorers, weights, cfg.batch_size, cfg.num_threads, cfg.video_reduction)
