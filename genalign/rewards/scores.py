"""`RewardScores` and the checks every reward runtime applies to a scoring call.

Where it fits: the local runtime (`composite.py`), the Ray runtime (`ray_runtime.py`) and the
HTTP runtime and server (`http_runtime.py`, `server.py`) all build scorers, validate inputs,
check each scorer's output and return `RewardScores` through these functions, so the failure
semantics described in `composite.py` are the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from genalign.rewards.base import RewardError, RewardFunction
from genalign.rewards.registry import REWARDS


@dataclass
class RewardScores:
    components: dict[str, torch.Tensor]
    """Raw per-component scores, float32 [B] on the CPU, keyed by component name."""
    weights: dict[str, float]
    """The (non-zero) weight of each component."""

    @property
    def total(self) -> torch.Tensor:
        """sum_k w_k r_k  [B] (Flow-GRPO's "avg" reward)."""
        return weighted_total(self.components, self.weights)

    @staticmethod
    def cat(parts: list["RewardScores"]) -> "RewardScores":
        """Scores of consecutive chunks of one batch, in order -> the batch's scores."""
        return RewardScores(
            {name: torch.cat([p.components[name] for p in parts]) for name in parts[0].components},
            dict(parts[0].weights),
        )

    def stats(self, prefix: str = "reward") -> dict[str, float]:
        """<prefix>_mean/std/min/max of the total and <prefix>_<name>_mean/... per component."""
        out = summary(self.total, prefix)
        for name, scores in self.components.items():
            out.update(summary(scores, f"{prefix}_{name}"))
        return out


def weighted_total(components: dict[str, torch.Tensor], weights: dict[str, float]) -> torch.Tensor:
    """{name: [B]}, {name: w} -> [B] = sum_k w_k r_k."""
    if not components:
        raise ValueError("RewardScores has no components")
    return sum(weights[name] * scores for name, scores in components.items())  # [B]


def summary(values: torch.Tensor, prefix: str) -> dict[str, float]:
    """mean/std/min/max of a [B] tensor; std is the population std (defined for B=1)."""
    values = values.double()
    return {
        f"{prefix}_mean": values.mean().item(),
        f"{prefix}_std": values.std(unbiased=False).item(),
        f"{prefix}_min": values.min().item(),
        f"{prefix}_max": values.max().item(),
    }


def check_scores(name: str, scores: Any, prompts: list[str], start: int = 0) -> torch.Tensor:
    """The scorer's output for samples [start, start + len(prompts)) -> float32 [n] CPU, or RewardError.

    `start` offsets the sample indices in messages, so an error names the index in the whole batch."""
    count = len(prompts)
    if not isinstance(scores, torch.Tensor) or scores.ndim != 1 or scores.shape[0] != count:
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        missing = start + (scores.shape[0] if isinstance(scores, torch.Tensor) and scores.ndim == 1 else 0)
        where = (
            f"; sample {missing} (prompt {prompts[missing - start]!r}) has no score"
            if start <= missing < start + count
            else ""
        )
        raise RewardError(
            f"reward {name!r} returned {shape} for samples [{start}, {start + count}); "
            f"expected a tensor of shape ({count},){where}"
        )
    scores = scores.detach().to("cpu", torch.float32)
    bad = (~torch.isfinite(scores)).nonzero().flatten()
    if len(bad):
        index = int(bad[0])
        raise RewardError(
            f"reward {name!r} gave a non-finite score {scores[index].item()} to sample "
            f"{start + index} (prompt {prompts[index]!r}); {len(bad)} of {count} samples are "
            f"non-finite. Fix the scorer or the images; a silent zero would bias the advantages"
        )
    return scores


def check_inputs(images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate a scoring call; returns metadata with one dict per sample (empty dicts when none given)."""
    if images.dtype != torch.uint8 or images.ndim not in (4, 5) or images.shape[-3] != 3:
        raise ValueError(
            f"rewards score uint8 images [B, 3, H, W] or video [B, F, 3, H, W]; "
            f"got {images.dtype} {tuple(images.shape)}"
        )
    if len(prompts) != images.shape[0]:
        raise ValueError(f"rewards: {len(prompts)} prompts for {images.shape[0]} images")
    if not metadata:
        return [{} for _ in prompts]
    if len(metadata) != len(prompts):
        raise ValueError(f"rewards: {len(metadata)} metadata rows for {len(prompts)} prompts")
    return list(metadata)


def batch_ranges(total: int, batch_size: int) -> list[tuple[int, int]]:
    """[(start, end)] chunks of at most batch_size covering range(total)."""
    return [(start, min(start + batch_size, total)) for start in range(0, total, batch_size)]


def build_scorer(
    name: str, device: str, kwargs: dict[str, Any], allow_import: list[str] | tuple[str, ...] = ()
) -> RewardFunction:
    """Construct one scorer by registry name (or a dotted path listed in `allow_import`,
    i.e. reward.allow_import) with its reward.kwargs.<name> mapping."""
    return REWARDS.resolve(name, allow_import)(device=device, **kwargs)
