"""`RewardConfig`: which scorers, with which weights, run where."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RewardConfig:
    components: dict[str, float] = field(default_factory=dict)
    """Scorer short name -> weight. Zero-weight components are not loaded."""
    kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-scorer constructor arguments: reward.kwargs.<name>.<arg>=value."""
    allow_import: list[str] = field(default_factory=list)
    """Dotted "package.module:Class" rewards (your own code) that reward.components and
    eval.gold_rewards may name. Importing runs code, so only names listed here are imported,
    and only from your own command line or recipe: a checkpoint's stored list is ignored
    (`genalign eval` and `trainer.resume_from` use the list you pass)."""
    aggregation: str = "weighted_sum"
    """"weighted_sum": R = sum_k w_k r_k, then one group normalisation (Flow-GRPO);
    "advantage_sum": normalise each component in its group, then sum w_k A_k (DanceGRPO)."""
    runtime: str = "local"
    """"local" (in-process) or "ray" (a pool of reward actors)."""
    batch_size: int = 16
    """Images per scorer call (for video, frames per call of a per-frame scorer)."""
    video_reduction: str = "mean"
    """How an image scorer's per-frame scores become one score per video [B, F, 3, H, W]:
    "mean" over frames or "min" (the worst frame). Images are unaffected."""
    num_workers: int = 1
    """Ray reward actors per scorer (runtime=ray)."""
    num_cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each reward actor (runtime=ray)."""
    num_gpus_per_worker: float = 0.0
    """GPUs Ray reserves for each reward actor (runtime=ray); fractions share a device."""
    timeout_s: float = 600.0
    """Upper bound on one scoring call on Ray before it is an error."""
    startup_timeout_s: float = 900.0
    """Upper bound on starting the Ray reward actors (building each scorer, which may load a
    model for minutes on a busy machine); separate from timeout_s, which bounds scoring."""
    async_scoring: bool = False
    """Score each finished rollout chunk (rollout.sample_batch_size samples) while the next
    one is sampled: on the Ray reward workers (runtime=ray) or on `num_threads` worker threads
    of this process (runtime=local). Reward models stay resident during sampling (not
    offloaded). Needs rollout.engine=local, which yields chunks. (`async` is a Python keyword.)"""
    num_threads: int = 1
    """Worker threads for async scoring with runtime=local. 1 calls the scorers in order, one
    chunk at a time, as serial scoring does (safe for a reward model on the GPU and for stateful
    scorers); more only for thread-safe, order-free scorers (rule rewards, remote services)."""
