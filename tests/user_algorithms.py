"""An algorithm defined outside the package, as a user's own module would: the tests name it
by its dotted path `user_algorithms:SignGRPO` (listed in algorithm.allow_import), never register it."""

from __future__ import annotations

import os

import torch

from genalign.algorithms.grpo import FlowGRPO


class SignGRPO(FlowGRPO):
    """Flow-GRPO's clipped surrogate on sign(Â) instead of Â: every trained sample pushes with
    the same strength. Declares its own needs and checks like a built-in algorithm."""

    title = "Sign-GRPO"
    stat_extremes = {**FlowGRPO.stat_extremes, "advantage_sign": ("min", "max")}

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        problems = super().config_problems(cfg)
        if cfg.algorithm.kl_beta > 0:
            problems.append(f"algorithm.kl_beta={cfg.algorithm.kl_beta}: Sign-GRPO has no KL term; set it to 0")
        return problems

    def compute_loss(self, policy, batch, advantages: torch.Tensor, step_index: int):
        signs = advantages.sign()  # [b]
        loss, stats = super().compute_loss(policy, batch, signs, step_index)
        return loss, {**stats, "advantage_sign": signs.detach()}


class OnePositionFewerOnRankOne(FlowGRPO):
    """A faulty algorithm for the multi-rank check (tests/integration/test_distributed_metrics.py):
    on torchrun rank 1 it trains one position fewer per unit than on the other ranks, as an
    algorithm whose positions depend on a rank's own data would. Each position is a forward and
    a backward the ranks take together, so the ranks must refuse it before the first one."""

    title = "Flow-GRPO with one position fewer on rank 1"

    def train_step_indices(self, batch):
        positions = super().train_step_indices(batch)
        return positions[:-1] if os.environ.get("RANK") == "1" else positions
