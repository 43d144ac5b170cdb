"""Flow-DPPO: Flow-GRPO's SDE rollout and ratio with a trust region on each trained step's exact
Gaussian KL instead of the PPO clip of the ratio (docs/algorithms.md §3.4; UniRL's `FlowDPPO`).

Where it fits: a `FlowGRPO` whose `surrogate` is `losses.kl_masked_surrogate`. Everything else
— the replay of a stored step (`algorithms/replay.py`), the trained steps, the advantages, the
optional KL to the reference — is Flow-GRPO's. The old policy's transition mean μ_old of each
trained step is the one the rollout recorded (`needs_rollout_means`): replay is bitwise
on-policy here (the parity preflight checks it), so it equals the mean UniRL recomputes with a
no-grad replay before the first update, without the extra forward pass.
"""

from __future__ import annotations

import torch

from genalign.algorithms.grpo import FlowGRPO, rollout_means_problems
from genalign.algorithms.losses import kl_masked_surrogate, latent_mean_kl
from genalign.algorithms.replay import ReplayedStep, at_steps
from genalign.rollout.batch import TrajectoryBatch


class FlowDPPO(FlowGRPO):
    title = "Flow-DPPO"

    needs_rollout_means = True
    owned_options = ("dppo",)
    stat_extremes = {**FlowGRPO.stat_extremes, "step_kl": ("max",)}

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """The KL is exact only for a Gaussian kernel, its μ_old is the rollout's, and there is
        no ratio clip to set."""
        problems = super().config_problems(cfg)
        problems += rollout_means_problems(cfg, "bounds each step's Gaussian KL", "its KL")
        algorithm = cfg.algorithm
        if algorithm.clip_range != type(algorithm)().clip_range:
            problems.append(
                f"algorithm.clip_range={algorithm.clip_range} is the ratio clip, which algorithm.name=flow_dppo "
                "replaces by its KL mask: remove it and set algorithm.dppo.kl_threshold instead"
            )
        return problems + algorithm.dppo.problems()

    def surrogate(
        self,
        log_ratio: torch.Tensor,
        advantages: torch.Tensor,
        weights: torch.Tensor | None,
        replayed: ReplayedStep,
        batch: TrajectoryBatch,
        j: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The unclipped ratio surrogate, a step dropped when its KL is at least τ and it pushes
        the way its advantage pulls (`kl_masked_surrogate`)."""
        step_kl = self.step_kl(replayed, batch, j)  # [b]
        out = kl_masked_surrogate(log_ratio, advantages, step_kl, self.cfg.dppo.kl_threshold, weights)
        size = len(log_ratio)
        return out.loss, {
            "ratio": out.ratio,
            "step_kl": step_kl,
            "kl_high_frac": out.kl_high_fraction.expand(size),
            "dropped_frac": out.dropped_fraction.expand(size),
            "dropped_frac_high": out.dropped_fraction_high.expand(size),
            "dropped_frac_low": out.dropped_fraction_low.expand(size),
            "approx_kl": out.approx_kl.expand(size),
        }

    def step_kl(self, replayed: ReplayedStep, batch: TrajectoryBatch, j: torch.Tensor) -> torch.Tensor:
        """KL(π_old ‖ π_θ) of each sample's step j [b] as a per-dimension mean, detached [b]: two
        Gaussians of one variance std² (the kernel's, a function of the σ schedule alone), so
        mean_dims (μ_θ − μ_old)² / (2 std²) exactly; with normalize_kl=false std is 1."""
        if batch.means is None:
            raise ValueError(
                "algorithm.name=flow_dppo needs the rollout kernel means; the trajectory has none "
                "(the rollout spec must set record_means)"
            )
        mean = replayed.step.mean.detach()  # [b, ...]
        old_mean = at_steps(batch.means, j).to(mean.device)  # [b, ...]
        std = replayed.step.std if self.cfg.dppo.normalize_kl else torch.ones_like(replayed.step.std)  # [b]
        return latent_mean_kl(mean, old_mean, std.to(mean.device))
