"""In-process rollout: prompt groups -> `TrajectoryBatch`.

Where it fits: step 2 of the loop (docs/architecture.md §2). The trainer hands it the step's
`PromptGroupBatch`; the Ray engine runs this same code inside each worker on a shard, so
both engines produce identical trajectories for identical seeds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, cast

import torch

from genalign.data.sampler import PromptGroupBatch
from genalign.finite import NonFiniteError, kind, non_finite_rows
from genalign.models.base import Condition, FlowPolicy, TokenPolicy, decode_samples
from genalign.rollout.batch import TrajectoryBatch, cat_batches
from genalign.rollout.chunks import encode_distinct, sample_fields, step_chunks
from genalign.rollout.config import SASolverConfig
from genalign.rollout.token_batch import Trajectories
from genalign.rollout.token_collector import generate_token_chunks
from genalign.sampling.sa_solver import sa_solver_trajectory
from genalign.sampling.trajectory import initial_noise, sample_trajectory
from genalign.sampling.windows import WindowSchedule, sde_step_mask


@dataclass(frozen=True)
class SamplingSpec:
    """Everything that decides how one batch is sampled (rollout and evaluation differ)."""

    height: int
    width: int
    num_steps: int
    guidance_scale: float
    noise_level: float
    chunk_size: int
    """Samples per denoiser batch; replay reuses it so batch geometry matches."""
    kernel: str = "flow_sde"
    """Transition kernel name (sampling/kernels.py KERNELS), stored in the trajectory for replay."""
    sa_solver: SASolverConfig | None = None
    """Sample with the SA-Solver instead of the kernel (rollout.sampler=sa_solver); its trajectories
    store the kernel name "sa_solver", which no replay accepts."""
    window: WindowSchedule | None = None
    """SDE window schedule (None: every step stochastic when noise_level > 0)."""
    ode_final_step: bool = False
    """The final step is an Euler step (rollout.ode_final_step)."""
    step: int = 1
    """The training step being sampled: the window schedule's input (see `at_step`)."""
    record_means: bool = False
    """Keep each step's kernel mean in the trajectory (an algorithm that needs μ_old declares it)."""
    temperature: float = 1.0
    """Softmax temperature of a token family's sampler (rollout.temperature); flow families ignore it."""
    guided_log_probs: bool = True
    """Token families: record log-probs under CFG (True) or of the conditional stream alone
    (algorithm.token_log_prob=conditional); sampling uses CFG either way."""

    def at_step(self, step: int) -> "SamplingSpec":
        """This spec for training step `step` (the window is a pure function of the step)."""
        return dataclasses.replace(self, step=step)

    def sde_mask(self, batch: int = 0) -> torch.Tensor:
        """[T] bool: the stochastic steps of the sampling batch whose first sample is at
        position `batch` of this step (its SDE window, `sampling/windows.py`)."""
        window = self.window.bounds(self.step, batch) if self.window is not None else None
        return sde_step_mask(self.num_steps, self.noise_level, window, self.ode_final_step)


def encode_unique(policy: FlowPolicy, prompts: list[str], with_negative: bool) -> Condition:
    """Encode each distinct prompt once and expand to the batch [B, ...]."""
    encoded: Condition  # a FlowPolicy's encode_prompts gives a Condition
    encoded, rows = encode_distinct(policy, prompts, with_negative)
    return encoded.index(rows)


def generate(
    policy: FlowPolicy | TokenPolicy, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
) -> Trajectories:
    """Sample every prompt of `groups` with its own seed, in chunks of `spec.chunk_size`.

    `positions` samples only those samples of the step (a Ray worker's or a torchrun rank's
    shard). The prompts are still encoded for the whole step in one call: text encoders give
    last-bit differences for different batch sizes, and encoding exactly as the in-process
    engine does keeps a shard bitwise equal to the same samples of the whole step."""
    return cat_batches(list(generate_chunks(policy, groups, spec, positions)))


def generate_chunks(
    policy: FlowPolicy | TokenPolicy, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
) -> Iterator[Trajectories]:
    """`generate`, one `spec.chunk_size` chunk at a time, so a caller can score finished
    chunks (reward.async_scoring) while the next one is sampled. The family's spec decides the
    sampler: "token" samples token trajectories (`token_collector`), "flow" SDE trajectories
    (below). This is the one place rollout asks which kind it runs."""
    if policy.spec.sampler == "token":
        # the family's spec says which protocol its policy implements
        return generate_token_chunks(cast(TokenPolicy, policy), groups, spec, positions)
    return _flow_chunks(cast(FlowPolicy, policy), groups, spec, positions)


def _non_finite_samples(chunk: PromptGroupBatch, rows: list[int], what: str) -> NonFiniteError:
    named = "; ".join(
        f"prompt {chunk.prompts[row][:80]!r} (prompt id {int(chunk.prompt_ids[row])}, seed {int(chunk.seeds[row])})"
        for row in rows[:3]
    )
    more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
    return NonFiniteError(
        f"sampling produced non-finite {what} for {len(rows)} sample(s): {named}{more}; the "
        "step is stopped before any reward or update sees them (check the weights: a resumed "
        "checkpoint, model.path, model.dtype)",
        rows=rows,
    )


def _require_finite_samples(chunk: PromptGroupBatch, batch: torch.Tensor, what: str) -> None:
    rows = non_finite_rows(batch)
    if rows:
        raise _non_finite_samples(chunk, rows, f"{what} ({kind(batch[rows])})")


def _flow_chunks(
    policy: FlowPolicy, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
) -> Iterator[TrajectoryBatch]:
    latent_shape = policy.latent_shape(spec.height, spec.width)
    sigmas = policy.sigmas(spec.num_steps, latent_shape).float().cpu()  # [T+1], stored with the trajectory
    shard = positions if positions is not None else list(range(len(groups)))
    firsts = shard[:: spec.chunk_size]  # each chunk's first position in the step: its sampling batch
    for (chunk, chunk_cond), first in zip(step_chunks(policy, groups, spec, positions), firsts):
        sde_mask = spec.sde_mask(first)  # [T]: one SDE window per sampling batch, as Flow-GRPO-Fast draws
        assert chunk.init_seeds is not None  # PromptGroupBatch.__post_init__ fills it from the seeds
        noise, generators = initial_noise(chunk.init_seeds.tolist(), chunk.seeds.tolist(), latent_shape)
        cond = chunk_cond.to(policy.device)
        if spec.sa_solver is not None:
            sampled = sa_solver_trajectory(policy, cond, noise, generators, sigmas, spec.guidance_scale, spec.sa_solver)
        else:
            sampled = sample_trajectory(
                policy,
                cond,
                noise,
                generators,
                sigmas,
                spec.guidance_scale,
                spec.noise_level,
                sde_mask,
                spec.kernel,
                spec.record_means,
            )
        _require_finite_samples(chunk, sampled.latents, "latents")  # [b, T+1, ...]: a NaN never reaches a reward
        try:
            # [b, 3, H, W] or [b, F, 3, H, W] uint8
            images = decode_samples(policy, sampled.latents[:, -1].to(policy.device), cond).cpu()
        except NonFiniteError as exc:  # the decoder's output (before its uint8 cast hides the NaN)
            raise _non_finite_samples(chunk, exc.rows, f"decoded images ({exc})") from None
        yield TrajectoryBatch(
            condition=chunk_cond,  # shared with the step's other chunks, on the CPU
            latents=sampled.latents,
            log_probs=sampled.log_probs,
            sigmas=sigmas,
            sde_mask=sde_mask.expand(len(chunk), -1).clone(),  # [b, T]
            images=images,
            guidance_scale=spec.guidance_scale,
            noise_level=spec.noise_level,
            kernel=spec.kernel if spec.sa_solver is None else "sa_solver",
            means=sampled.means,
            **sample_fields(chunk),
        )
