"""Random reward: uniform [0, 1) scores that ignore the images — a control for learning tests.

Where it fits: a component like any other; a run trained on it must NOT improve any real
metric, which is how a learning test tells a working optimiser from a leaky one.

Scores come from a fresh generator seeded by (seed, call index) through numpy's
`SeedSequence`, so they are reproducible from the call count alone and never read the
pixels. The call index counts `score` calls on this instance; with the local runtime that is
one call per `reward.batch_size` chunk; each Ray reward actor counts its own calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from genalign.rewards.options import parse_options


@dataclass
class RandomOptions:
    seed: int = 0
    """Base seed; call k draws from SeedSequence([seed, k])."""

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none."""
        return ()


def random_scores(seed: int, call_index: int, batch_size: int) -> torch.Tensor:
    """float32 [batch_size] uniform in [0, 1) from a generator seeded by (seed, call_index)."""
    state = np.random.SeedSequence([seed, call_index]).generate_state(1)[0]
    generator = torch.Generator().manual_seed(int(state))
    return torch.rand(batch_size, generator=generator, dtype=torch.float32)  # [B]


class RandomReward:
    name = "random"

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, RandomOptions, kwargs)
        self.device = device
        self.calls = 0

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        scores = random_scores(self.options.seed, self.calls, len(prompts))  # [B]
        self.calls += 1
        return scores
