"""Reward feedback: a differentiable reward back-propagated through the last denoising steps
(ReFL, DRaFT-K, DRaFT-LV, AlignProp, DRTune; docs/algorithms.md §10).

Where it fits: the rollout samples with the Euler ODE (rollout.noise_level=0) and stores every
latent x_0 … x_T, so "denoise without grad to step s" is the stored x_s: no forward is spent
twice. `compute_loss` restarts each sample's chain at its own stored x_s, s = T − K with K drawn
per sample (`truncation_draws`), runs the denoiser with grad through the steps s … e − 1
(`denoise_with_grad`; e = T, or s + grad_steps with the last step jumping to x̂0 as ReFL does),
decodes with grad (`decode_pixels`) and scores with the run's differentiable scorers
(`score_pixels`, handed over by `attach_rewards`); the loss is −scale·r or scale·max(0, m − r)
(`reward_feedback_loss`). DRaFT-LV instead re-noises the stored final x_T to the last step's σ
`renoise_draws` times (one training position each) and takes one step with grad from each.
DRTune runs the whole chain from the stored noise (truncation=full) with the denoiser's input
detached at every step and grad only at `supervised_draws`' equally spaced steps, so the
reward reaches the early steps at the cost of a few forwards' activations; `early_stop_draws`
optionally ends a chain early at a predicted x̂0.
No log-prob, no advantage, no reference: the rollout's rewards are only logged.

Departures from the references, on purpose (docs/algorithm_references.md):
* K is drawn per sample from its seed (ImageReward's ReFL and AlignProp draw one per batch
  from the global RNG): the draw does not depend on the micro-batch, and resume is bitwise.
* The chain is the flow-matching Euler ODE the rollout sampled (AlignProp's DDIM with η = 1
  is not offered: its noise would have to be the rollout's, which an ODE rollout has none of).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils.checkpoint import checkpoint

from genalign.algorithms.base import AlgorithmBase
from genalign.algorithms.config import AlgorithmConfig, RewardFeedbackConfig
from genalign.algorithms.forward_draws import seeded_generator
from genalign.algorithms.forward_losses import noised
from genalign.models.base import FlowPolicy
from genalign.rewards.base import is_differentiable
from genalign.rollout.batch import TrajectoryBatch
from genalign.weights.reference import ReferencePolicy

VelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(latents [r, ...], σ [r], rows [r] of the micro-batch) -> velocity [r, ...]."""


def truncation_draws(seeds: torch.Tensor, cfg: RewardFeedbackConfig, num_steps: int) -> torch.Tensor:
    """K [B] int64 per sample, each in 1..num_steps: how many final steps its chain runs with
    grad, drawn from a generator seeded by the sample's seed (algorithm.reward_feedback.truncation)."""
    ks = []
    for seed in seeds.tolist():
        generator = seeded_generator("truncation", seed)
        if cfg.truncation == "full":
            k = num_steps
        elif cfg.truncation == "fixed":
            k = cfg.truncation_steps
        elif cfg.truncation == "uniform":
            k = int(torch.randint(cfg.truncation_min, cfg.truncation_max + 1, (1,), generator=generator))
        else:  # AlignProp's loop: b = int(N(T − mean, std)) redrawn until 1 <= b < T, then K = T − b
            start = -1
            while not 1 <= start < num_steps:
                start = int(
                    num_steps - cfg.truncation_mean + cfg.truncation_std * float(torch.randn(1, generator=generator))
                )
            k = num_steps - start
        ks.append(min(k, num_steps))
    return torch.tensor(ks, dtype=torch.long)


def chain_bounds(truncation: torch.Tensor, num_steps: int, grad_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(start s [B], end e [B]) of each sample's chain with grad: s = T − K; e = T (grad_steps 0)
    or min(s + grad_steps, T)."""
    start = num_steps - truncation
    end = torch.full_like(start, num_steps) if grad_steps == 0 else (start + grad_steps).clamp(max=num_steps)
    return start, end


def early_stop_draws(seeds: torch.Tensor, early_stop_max: int) -> torch.Tensor:
    """n' [B] int64 per sample, uniform on 0..early_stop_max, from a generator seeded by the
    sample's seed: how many steps before the last its chain stops and jumps to x̂0."""
    return torch.tensor(
        [
            int(torch.randint(0, early_stop_max + 1, (1,), generator=seeded_generator("early_stop", seed)))
            for seed in seeds.tolist()
        ],
        dtype=torch.long,
    )


def supervised_draws(
    seeds: torch.Tensor, start: torch.Tensor, end: torch.Tensor, count: int, num_steps: int
) -> torch.Tensor:
    """Mask [B, T] bool of the steps whose denoiser forward runs with grad (DRTune's subset):
    of sample b's chain steps s_b … e_b − 1 (L = e_b − s_b of them), `count` equally spaced
    ones, s_b + o + i·⌊L / count⌋ for i = 0 … count − 1, the offset o uniform on the L −
    (count − 1)·⌊L / count⌋ positions that keep the last inside the chain, drawn from a
    generator seeded by the sample's seed; a chain of at most `count` steps keeps them all."""
    mask = torch.zeros(len(seeds), num_steps, dtype=torch.bool)
    for row, seed in enumerate(seeds.tolist()):
        first, length = int(start[row]), int(end[row] - start[row])
        if length <= count:
            mask[row, first : first + length] = True
            continue
        spacing = length // count
        offsets = length - (count - 1) * spacing
        offset = int(torch.randint(0, offsets, (1,), generator=seeded_generator("supervised", seed)))
        mask[row, first + offset + spacing * torch.arange(count)] = True
    return mask


def denoise_with_grad(
    velocity: VelocityFn,
    first: torch.Tensor,
    sigmas: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    checkpointed: bool = False,
    supervised: torch.Tensor | None = None,
    stop_input_gradient: bool = False,
) -> torch.Tensor:
    """x̂0 [B, ...] from x_{s_b} = `first`[b] through steps s_b … e_b − 1 with grad.

    Step j moves sample b from σ_j to σ_{j+1} by Euler, x ← x + (σ' − σ_j)·v̂, except its last
    step (j = e_b − 1), which goes to σ' = 0: x̂0 = x − σ_j·v̂, the x0 prediction (ReFL's
    `pred_original_sample`); when e_b = T that is the ordinary last step, σ_T being 0. A sample
    waits (no forward) until its own start. `checkpointed` keeps only each step's input and
    recomputes the forward in backward (torch.utils.checkpoint). DRTune's options: `supervised`
    [B, T] bool runs the denoiser with grad only at its True steps (the others' v̂ is a constant
    and the gradient passes them through the update's x term); `stop_input_gradient` detaches
    the denoiser's input, v̂(sg(x)), so no gradient goes through its input Jacobian."""
    x = first
    for j in range(int(start.min()), int(end.max())):
        rows = ((start <= j) & (j < end)).nonzero().squeeze(1)  # [r] samples stepping now
        if rows.numel() == 0:
            continue
        sigma = torch.full((len(rows),), float(sigmas[j]), device=x.device, dtype=x.dtype)  # [r]
        continues = (end[rows] > j + 1).to(x.device, x.dtype)  # [r] 1: step on; 0: this is its last step
        target = float(sigmas[j + 1]) * continues  # [r] σ_{j+1}, or 0 for the x0 jump
        current = x[rows]  # [r, ...]
        inputs = current.detach() if stop_input_gradient else current
        with_grad = torch.ones(len(rows), dtype=torch.bool) if supervised is None else supervised[rows, j]
        v = _step_velocity(velocity, inputs, sigma, rows, with_grad, checkpointed)
        shape = (-1,) + (1,) * (current.dim() - 1)
        x = x.index_copy(0, rows.to(x.device), current + (target - sigma).view(shape) * v.to(x.dtype))
    return x


def _step_velocity(
    velocity: VelocityFn,
    inputs: torch.Tensor,
    sigma: torch.Tensor,
    rows: torch.Tensor,
    with_grad: torch.Tensor,
    checkpointed: bool,
) -> torch.Tensor:
    """v̂ [r, ...] of one step: the rows where `with_grad` [r] holds through autograd
    (checkpointed when asked), the others under no_grad, each group one forward."""

    def forward(picked: torch.Tensor) -> torch.Tensor:
        if checkpointed:
            return checkpoint(velocity, inputs[picked], sigma[picked], rows[picked], use_reentrant=False)
        return velocity(inputs[picked], sigma[picked], rows[picked])

    if bool(with_grad.all()):
        return forward(torch.arange(len(rows)))
    picked, idle = with_grad.nonzero().squeeze(1), (~with_grad).nonzero().squeeze(1)
    with torch.no_grad():
        constant = velocity(inputs[idle], sigma[idle], rows[idle])  # [r', ...]
    if picked.numel() == 0:
        return constant
    trained = forward(picked)
    where = torch.empty(len(rows), dtype=torch.long)
    where[picked], where[idle] = torch.arange(len(picked)), len(picked) + torch.arange(len(idle))
    return torch.cat([trained, constant.to(trained.dtype)])[where.to(trained.device)]


def reward_feedback_loss(rewards: torch.Tensor, loss: str, scale: float, margin: float) -> torch.Tensor:
    """Per-sample loss [B] of rewards [B]: "negative" −scale·r (DRaFT, AlignProp), "hinge"
    scale·max(0, margin − r) (ReFL's `F.relu(-rewards + 2) * grad_scale`)."""
    if loss == "hinge":
        return scale * torch.relu(margin - rewards)
    return -scale * rewards


class RewardFeedback(AlgorithmBase):
    title = "reward feedback"
    needs_old_logprob = False
    needs_reward_gradients = True
    owned_options = ("reward_feedback",)

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """An ODE rollout (the chain restarts from its stored latents), no KL term, the ranges."""
        problems = super().config_problems(cfg)
        options = cfg.algorithm.reward_feedback
        if cfg.rollout.noise_level != 0:
            problems.append(
                f"algorithm.name=reward_feedback restarts its chain from the rollout's stored latents, which must "
                f"be the Euler ODE's: set rollout.noise_level=0 (got {cfg.rollout.noise_level})"
            )
        if cfg.algorithm.kl_beta > 0:
            problems.append(
                "algorithm.name=reward_feedback has no KL term (none of ReFL, DRaFT, AlignProp uses one): "
                "set algorithm.kl_beta=0"
            )
        if options.truncation == "fixed" and options.truncation_steps > cfg.rollout.num_steps:
            problems.append(
                f"algorithm.reward_feedback.truncation_steps={options.truncation_steps} is more than the rollout's "
                f"rollout.num_steps={cfg.rollout.num_steps}"
            )
        if options.truncation == "uniform" and options.truncation_max > cfg.rollout.num_steps:
            problems.append(
                f"algorithm.reward_feedback.truncation_max={options.truncation_max} is more than the rollout's "
                f"rollout.num_steps={cfg.rollout.num_steps}"
            )
        if options.early_stop_max >= cfg.rollout.num_steps:
            problems.append(
                f"algorithm.reward_feedback.early_stop_max={options.early_stop_max} must be below the rollout's "
                f"rollout.num_steps={cfg.rollout.num_steps}"
            )
        if options.truncation == "gaussian" and cfg.rollout.num_steps < 2:
            problems.append("algorithm.reward_feedback.truncation=gaussian draws K in 1..T-1: rollout.num_steps >= 2")
        return problems + options.problems()

    @classmethod
    def backprop_forwards(cls, cfg: AlgorithmConfig, num_steps: int) -> tuple[int, bool]:
        """The longest chain a sample runs with grad, checkpointed per step when asked."""
        options = cfg.reward_feedback
        return options.max_chain_steps(num_steps), options.gradient_checkpointing

    def __init__(
        self,
        cfg: AlgorithmConfig,
        reference: ReferencePolicy | None = None,
        parameters: dict[str, torch.nn.Parameter] | None = None,
    ):
        self.cfg = cfg
        self._take_reference(cfg, reference)
        self.scorers: dict[str, Any] = {}
        self.weights: dict[str, float] = {}

    def attach_rewards(self, rewards: Any) -> None:
        """Keep the local runtime's scorers and weights (the config allowed only differentiable
        ones in this process; a runtime without them is refused here, before any step)."""
        scorers = getattr(rewards, "scorers", None)
        if not scorers:
            raise ValueError(
                "algorithm.name=reward_feedback needs the reward models in the trainer's process "
                f"(reward.runtime=local); got a {type(rewards).__name__}"
            )
        broken = [name for name, scorer in scorers.items() if not is_differentiable(scorer)]
        if broken:
            raise ValueError(f"reward feedback: reward.components {broken} give no image gradients")
        self.scorers, self.weights = dict(scorers), dict(rewards.weights)

    def trained_units(
        self, advantages: torch.Tensor, micro_batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, int]:
        """Every sample: the gradient is the reward's own, whatever the group's spread."""
        return torch.arange(len(advantages)), micro_batch_size

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        """One chain per sample, or DRaFT-LV's `renoise_draws` re-noised copies."""
        return list(range(max(1, self.cfg.reward_feedback.renoise_draws)))

    def chain_start(self, batch: TrajectoryBatch, position: int, device: torch.device):
        """(x_s [b, ...], s [b], e [b]) of each sample's chain at training position `position`."""
        options, num_steps = self.cfg.reward_feedback, batch.num_steps
        if options.renoise_draws:  # DRaFT-LV: x_{T−1} = (1 − σ)·sg(x_T) + σ·ε, a fresh ε per draw
            clean = batch.latents[:, -1].to(device)  # [b, ...]
            noise = torch.stack(
                [
                    torch.randn(clean.shape[1:], generator=seeded_generator("renoise", seed, position))
                    for seed in batch.seeds.tolist()
                ]
            ).to(device, clean.dtype)  # [b, ...]
            sigma = batch.sigmas[num_steps - 1].expand(len(batch)).to(device)  # [b]
            start = torch.full((len(batch),), num_steps - 1, dtype=torch.long)
            return noised(clean, noise, sigma)[0], start, start + 1
        start, end = chain_bounds(truncation_draws(batch.seeds, options, num_steps), num_steps, options.grad_steps)
        if options.early_stop_max:  # the chain keeps at least its first step
            end = torch.maximum(num_steps - early_stop_draws(batch.seeds, options.early_stop_max), start + 1)
        first = batch.latents[torch.arange(len(batch)), start].to(device)  # [b, ...] the stored x_s
        return first, start, end

    def compute_loss(
        self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if not self.scorers:
            raise RuntimeError("reward feedback: attach_rewards was not called before training")
        device, options = policy.device, self.cfg.reward_feedback
        cond = batch.condition.to(device)

        def velocity(latents: torch.Tensor, sigma: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            return policy.velocity(latents, sigma, cond.index(rows.to(device)), batch.guidance_scale)

        first, start, end = self.chain_start(batch, step_index, device)
        supervised = None
        if options.supervised_steps:
            supervised = supervised_draws(batch.seeds, start, end, options.supervised_steps, batch.num_steps)
        x0 = denoise_with_grad(
            velocity,
            first,
            batch.sigmas.to(device),
            start,
            end,
            options.gradient_checkpointing,
            supervised,
            options.stop_input_gradient,
        )
        pixels = policy.decode_pixels(x0)  # type: ignore[attr-defined]  # [b, 3, H, W] in [0, 1]
        metadata = batch.metadata or [{} for _ in range(len(batch))]
        rewards = torch.zeros(len(batch), device=device, dtype=pixels.dtype)  # [b]
        for name, scorer in self.scorers.items():
            rewards = rewards + self.weights[name] * scorer.score_pixels(pixels, batch.prompts, metadata).to(device)
        per_sample = reward_feedback_loss(rewards, options.loss, options.loss_scale, options.hinge_margin)  # [b]
        stats = {
            "policy_loss": per_sample.detach(),
            "feedback_reward": rewards.detach(),
            "chain_steps": (end - start).float(),
            "supervised_steps": (end - start).float() if supervised is None else supervised.sum(1).float(),
        }
        return per_sample.mean(), stats
