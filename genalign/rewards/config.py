"""`RewardConfig`: which scorers, with which weights, run where."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from genalign.config.checks import positive_problems

Aggregation = Literal["weighted_sum", "advantage_sum"]
RewardRuntimeName = Literal["local", "ray", "http"]
VideoReduction = Literal["mean", "min"]


def active_weights(weights: dict[str, float]) -> dict[str, float]:
    """The scorers of a {name: weight} mapping (reward.components, eval.gold_rewards) that are
    on. A weight of 0 turns a scorer off: it is never built, loaded, planned, placed or scored,
    so a recipe's scorer can be switched off from the command line (reward.components.ocr=0).
    The one place that rule is written."""
    return {name: weight for name, weight in weights.items() if weight != 0}


REWARD_PATH_OPTIONS = {
    "toy_shape": "path",
    "toy_shape_judge": "path",
    "aesthetic": "head_path",
    "hpsv2": "weights_path",
    "hpsv21": "weights_path",
    "image_reward": "weights_path",
}
"""Scorer options that name a local file or directory (never a hub id), checked up front
(preflight/files.py) and `~`-expanded when the config is built (config/loader.py)."""


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
    aggregation: Aggregation = "weighted_sum"
    """"weighted_sum": R = sum_k w_k r_k, then one group normalisation (Flow-GRPO);
    "advantage_sum": normalise each component in its group, then sum w_k A_k (DanceGRPO)."""
    runtime: RewardRuntimeName = "local"
    """"local" (in-process), "ray" (a pool of reward actors) or "http" (a `genalign serve-reward`
    server at reward.url)."""
    url: str = ""
    """runtime=http: the reward server's base URL, e.g. "http://10.0.0.5:8700"."""
    token_env: str = "GENALIGN_REWARD_TOKEN"
    """runtime=http: the environment variable holding the server's shared-secret token (the
    token itself never goes into a config, a checkpoint or a log)."""
    batch_size: int = 16
    """Images per scorer call (for video, frames per call of a per-frame scorer)."""
    video_reduction: VideoReduction = "mean"
    """How an image scorer's per-frame scores become one score per video [B, F, 3, H, W]:
    "mean" over frames or "min" (the worst frame). Images are unaffected."""
    num_workers: int = 1
    """Ray reward actors per scorer (runtime=ray)."""
    num_cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each reward actor (runtime=ray)."""
    num_gpus_per_worker: float = 0.0
    """GPUs Ray reserves for each reward actor (runtime=ray); fractions share a device."""
    timeout_s: float = 600.0
    """Upper bound on one scoring call (Ray) or one request to the reward server (http, each
    attempt) before it is an error."""
    startup_timeout_s: float = 900.0
    """Upper bound on starting the Ray reward actors (building each scorer, which may load a
    model for minutes on a busy machine), or on reaching the reward server (http); separate
    from timeout_s, which bounds scoring."""
    async_scoring: bool = False
    """Score each finished rollout chunk (rollout.sample_batch_size samples) while the next
    one is sampled: on the Ray reward workers (runtime=ray) or on `num_threads` worker threads
    of this process (runtime=local). Reward models stay resident during sampling (not
    offloaded). Needs rollout.engine=local, which yields chunks. (`async` is a Python keyword.)"""
    num_threads: int = 1
    """Worker threads for async scoring with runtime=local. 1 calls the scorers in order, one
    chunk at a time, as serial scoring does (safe for a reward model on the GPU and for stateful
    scorers); more only for thread-safe, order-free scorers (rule rewards, remote services)."""

    def active_components(self) -> dict[str, float]:
        """reward.components without the ones weighted 0 (`active_weights`)."""
        return active_weights(self.components)

    def problems(self) -> list[str]:
        """Something to score, sizes and limits, and the reward server's address (the names
        against the reward registry, and reward.kwargs against each scorer's options, are
        preflight's: preflight/validate.py)."""
        problems = []
        if not self.components:
            problems.append("reward.components is empty: name at least one reward, e.g. reward.components.ocr=1.0")
        elif not self.active_components():
            problems.append("reward.components: every weight is 0, so nothing would be scored")
        problems += positive_problems(
            {
                "reward.batch_size": self.batch_size,
                "reward.num_workers": self.num_workers,
                "reward.num_threads": self.num_threads,
            }
        )
        if self.timeout_s <= 0:
            problems.append(f"reward.timeout_s must be > 0, got {self.timeout_s}")
        return problems + self.http_problems()

    def http_problems(self) -> list[str]:
        """runtime=http needs an http(s) reward.url with a host, and a token variable name."""
        if self.runtime != "http":
            return []
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 - parsed lazily: raises for a port that is not a number in range
        except ValueError as exc:  # an unclosed IPv6 bracket, a port out of range
            return [
                f"reward.url={self.url!r} is not a URL ({exc}); e.g. reward.url=http://127.0.0.1:8700 or "
                f"http://[::1]:8700"
            ]
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return [
                f"reward.url={self.url!r}: reward.runtime=http needs the reward server's URL, e.g. "
                f"reward.url=http://127.0.0.1:8700 (start the server with `genalign serve-reward`)"
            ]
        if not self.token_env:
            return ["reward.token_env is empty: name the environment variable that holds the server's token"]
        return []
