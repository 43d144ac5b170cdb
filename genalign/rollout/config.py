"""`RolloutConfig`: how each training step samples trajectories."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from genalign.config.checks import non_negative_problems, positive_problems

Kernel = Literal["flow_sde", "dance_sde", "em_sde", "cps", "cps_gaussian"]
"""`rollout.kernel`'s choices (each one's step: sampling/kernels.py:KERNELS)."""
Sampler = Literal["kernel", "sa_solver"]
"""`rollout.sampler`'s choices: one-step transition kernels, or the multistep SA-Solver."""
WindowSchedule = Literal["random", "progressive", "fixed"]
WindowDraw = Literal["per_batch", "per_step"]
RolloutEngine = Literal["local", "ray"]
Overlap = Literal["off", "one_step"]

MAX_IMAGE_SIDE = 4096
"""Largest rollout/eval side accepted: above it one image's latents and activations no longer
fit any accelerator we target; a typo like 100000 should fail here, not in an allocator."""


@dataclass
class SDEWindowConfig:
    """Only a window of denoising steps is stochastic and trained; the rest are Euler ODE steps
    (Flow-GRPO-Fast, docs/algorithms.md §2.6; MixGRPO, §3.2). See `sampling/windows.py`."""

    size: int = 0
    """Steps in the window; 0 = no window (every step stochastic, the Flow-GRPO default)."""
    lo: int = 0
    """First step the window may cover."""
    hi: int | None = None
    """End (exclusive) of the steps the window may cover. None: rollout.num_steps // 2, the
    high-noise half (Flow-GRPO-Fast's `sde_window_range = (0, num_steps // 2)`); negative:
    counted from the end (-1 = every step but the final one, as MixGRPO's max_timesteps)."""
    schedule: WindowSchedule = "random"
    """"random" (Flow-GRPO-Fast: new start each step), "progressive" (MixGRPO: slides by
    `shift_by` every `shift_every` steps, rolling back at the end) or "fixed" (always at lo)."""
    shift_every: int = 25
    """MixGRPO τ (`iters_per_group`): training steps between window moves (progressive only)."""
    shift_by: int = 1
    """MixGRPO s (`prog_overlap_step`): steps the window moves each time (progressive only)."""
    draw: WindowDraw = "per_batch"
    """When a random window is drawn: "per_batch" (Flow-GRPO-Fast: one per sampling batch, i.e.
    per rollout chunk of `rollout.sample_batch_size` samples, so one step's samples train
    different steps) or "per_step" (one window for all of a step's samples)."""

    def bounds_range(self, num_steps: int) -> tuple[int, int]:
        """[lo, hi) with hi resolved against the rollout's num_steps."""
        if self.hi is None:
            return self.lo, num_steps // 2
        return self.lo, (self.hi if self.hi >= 0 else num_steps + self.hi)

    def problems(self, num_steps: int) -> list[str]:
        """The window's size and range against the rollout's `num_steps` (the range only when
        num_steps is positive: rollout.num_steps reports itself otherwise)."""
        problems = non_negative_problems({"rollout.sde_window.size": self.size}, " (0 = no window)")
        if self.size <= 0:
            return problems
        lo, hi = self.bounds_range(num_steps)
        if num_steps > 0 and not (0 <= lo and lo + self.size <= hi <= num_steps):
            problems.append(
                f"rollout.sde_window: a window of {self.size} steps must fit in [lo, hi) = [{lo}, {hi}) "
                f"inside the {num_steps} rollout steps (0 <= lo, lo + size <= hi <= rollout.num_steps; "
                "hi null = rollout.num_steps // 2, negative = counted from the end)"
            )
        if self.shift_every < 1 or self.shift_by < 1:
            problems.append(
                f"rollout.sde_window.shift_every ({self.shift_every}) and shift_by ({self.shift_by}) must be >= 1"
            )
        return problems


SA_SOLVER_MAX_ORDER = 4
"""The SA-Solver reference's highest predictor / corrector order (Lagrange nodes per step)."""


@dataclass
class SASolverConfig:
    """`rollout.sa_solver`: the SA-Solver's stochasticity τ and orders (read when rollout.sampler=sa_solver).
    Defaults: the AWM reference's GenEval/OCR sampler (be51372)."""

    tau: float = 0.4
    """Stochasticity τ ≥ 0 inside the window (the reference's `sample.noise_level`; its PickScore
    config sets 0: the deterministic order-2 Adams ODE solver)."""
    tau_sigma_min: float = 0.3
    """τ applies where the step's target t (= σ) is in [tau_sigma_min, tau_sigma_max]; elsewhere 0."""
    tau_sigma_max: float = 0.9
    """The upper end of the τ window (the reference's 0.9)."""
    predictor_order: int = 2
    """Nodes of the Adams–Bashforth predictor (1..4; the reference's 2)."""
    corrector_order: int = 2
    """Nodes of the Adams–Moulton corrector (0 = none, 1..4; the reference's 2)."""

    def tau_at(self, t: float) -> float:
        """τ(t): `tau` on the window, 0 outside (the reference's stochasticity control function)."""
        return self.tau if self.tau_sigma_min <= t <= self.tau_sigma_max else 0.0

    def min_steps(self) -> int:
        """Fewest steps the PC schedule runs with (the reference asserts it)."""
        return max(self.predictor_order, self.corrector_order - 1, 2)

    def problems(self, num_steps: int) -> list[str]:
        problems = []
        if self.tau < 0:
            problems.append(f"rollout.sa_solver.tau must be >= 0, got {self.tau}")
        if not 0 <= self.tau_sigma_min <= self.tau_sigma_max <= 1:
            problems.append(
                "rollout.sa_solver: need 0 <= tau_sigma_min <= tau_sigma_max <= 1, got "
                f"[{self.tau_sigma_min}, {self.tau_sigma_max}]"
            )
        if not 1 <= self.predictor_order <= SA_SOLVER_MAX_ORDER:
            problems.append(
                f"rollout.sa_solver.predictor_order must be in 1..{SA_SOLVER_MAX_ORDER}, got {self.predictor_order}"
            )
        if not 0 <= self.corrector_order <= SA_SOLVER_MAX_ORDER:
            problems.append(
                f"rollout.sa_solver.corrector_order must be in 0..{SA_SOLVER_MAX_ORDER} (0 = no corrector), got "
                f"{self.corrector_order}"
            )
        elif 1 <= self.predictor_order <= SA_SOLVER_MAX_ORDER and num_steps < self.min_steps():
            problems.append(
                f"rollout.sampler=sa_solver with orders {self.predictor_order}/{self.corrector_order} needs "
                f"rollout.num_steps >= {self.min_steps()}, got {num_steps}"
            )
        return problems


@dataclass
class RolloutConfig:
    """Rollout shape and sampler. Units are in the names: prompts vs samples."""

    n: int = 8
    """Samples per prompt (the GRPO group size G)."""
    rollout_batch_size: int = 8
    """Prompts (groups) per training step; samples per step = n * rollout_batch_size."""
    sample_batch_size: int = 8
    """Samples per denoiser forward during rollout (also the replay micro-batch)."""
    height: int = 512
    """Image height in pixels (rollout and evaluation)."""
    width: int = 512
    """Image width in pixels (rollout and evaluation)."""
    num_steps: int = 10
    """Denoising steps of the training rollout."""
    guidance_scale: float = 4.5
    """CFG scale used in rollout and (identically) in replay; 1.0 disables CFG. It is the
    scale of the family's pipeline in that pipeline's own form: v_u + w(v_c − v_u) for most,
    Cosmos' v_c + w(v_c − v_u) for model.family=cosmos (its w = 7 is w + 1 = 8 in the first form)."""
    noise_level: float = 0.7
    """SDE noise level a (Flow-GRPO); 0 reproduces the Euler ODE sampler."""
    kernel: Kernel = "flow_sde"
    """Transition kernel of rollout and replay (sampling/kernels.py): "flow_sde" (Flow-GRPO,
    docs/algorithms.md §2.2), "dance_sde" (DanceGRPO, constant noise scale η = noise_level, §3.1),
    "em_sde" (Euler–Maruyama with diffusion 2σ, noise scale a·sqrt(2σ): NextStep-1's head sampler at a = 1, §2.2),
    "cps" (Coefficients-Preserving Sampling with the reference code's constant-free log-prob
    −mean((x − μ)²), §2.3; pair with clip_range 1e-5) or "cps_gaussian" (CPS with the true
    Gaussian log-density, std c = σ_next·sin(a·π/2))."""
    sampler: Sampler = "kernel"
    """How the training rollout integrates: "kernel" (each step one `rollout.kernel` transition,
    SDE steps recording log-probs, the rest Euler ODE steps) or "sa_solver" (the stochastic Adams
    predictor–corrector SA-Solver, `rollout.sa_solver`, docs/algorithms.md §11.4; it records no
    log-probs, so only an algorithm that trains on the final sample accepts it: AWM, whose
    reference samples with it). Evaluation always samples with the Euler ODE."""
    sa_solver: SASolverConfig = field(default_factory=SASolverConfig)
    """SA-Solver stochasticity and orders (read when rollout.sampler=sa_solver)."""
    sde_window: SDEWindowConfig = field(default_factory=SDEWindowConfig)
    """Stochastic window (Flow-GRPO-Fast / MixGRPO); size 0 = every step stochastic."""
    ode_final_step: bool = False
    """Make the final denoising step an Euler (ODE) step, so the image is the last step's clean
    prediction x̂0 = x − σ·v: DanceGRPO decodes exactly that (`latents = pred_original`), and
    Flow-GRPO-Fast does it for window_size 0. False: the final step uses the kernel like the
    others (Flow-GRPO; its last step is nearly deterministic and left out of training)."""
    temperature: float = 1.0
    """Token families (Janus-Pro): softmax temperature of the image-token sampler, in rollout,
    replay and evaluation alike (Janus-Pro's and T2I-R1's 1.0); flow families have no use for
    it and must leave it at 1.0."""
    same_initial_noise: bool = False
    """Share x_T within a group (DanceGRPO) instead of distinct noise (Flow-GRPO default)."""
    engine: RolloutEngine = "local"
    """"local" (in-process) or "ray" (rollout actors)."""
    num_workers: int = 1
    """Ray rollout actors when engine=ray."""
    overlap: Overlap = "off"
    """"off": each step samples with the weights its update starts from. "one_step": with
    Ray rollout workers on their own devices (engine=ray, not colocated), step k+1's rollout
    runs on the workers while the trainer updates on step k (verl-omni's separate-async
    trainer and UniRL do the same), so from step 2 on the samples are one update old; an
    algorithm trained on the rollout's log-probs then needs algorithm.rollout_correction
    (truncate or mask) to correct them. Checkpoints keep the weights the rollout in flight
    samples with, so a resume is bitwise the run it continues (docs/distributed.md)."""

    def problems(self) -> list[str]:
        """Sizes, scales and the SDE window no rollout could run (the family's sizes:
        models/family_checks.py)."""
        problems = positive_problems(
            {
                "rollout.n": self.n,
                "rollout.rollout_batch_size": self.rollout_batch_size,
                "rollout.sample_batch_size": self.sample_batch_size,
                "rollout.num_steps": self.num_steps,
                "rollout.height": self.height,
                "rollout.width": self.width,
                "rollout.num_workers": self.num_workers,
            }
        )
        problems += [
            f"rollout.{name}={side} is too large (max {MAX_IMAGE_SIDE} pixels a side)"
            for name, side in (("height", self.height), ("width", self.width))
            if side > MAX_IMAGE_SIDE
        ]
        problems += non_negative_problems({"rollout.noise_level": self.noise_level})
        if self.guidance_scale < 1:
            problems.append(f"rollout.guidance_scale must be >= 1 (1.0 turns CFG off), got {self.guidance_scale}")
        if self.temperature <= 0:
            problems.append(
                f"rollout.temperature must be > 0 (the sampler's softmax temperature), got {self.temperature}"
            )
        return problems + self.sde_window.problems(self.num_steps) + self.sampler_problems()

    def sampler_problems(self) -> list[str]:
        """rollout.sampler=sa_solver: its orders and τ, and no kernel-only key set (each would be ignored)."""
        if self.sampler != "sa_solver":
            return []
        kernel_only = {
            "rollout.noise_level": self.noise_level,
            "rollout.sde_window.size": self.sde_window.size,
            "rollout.ode_final_step": self.ode_final_step,
        }
        return self.sa_solver.problems(self.num_steps) + [
            f"{key}={value} shapes the kernel sampler; rollout.sampler=sa_solver takes its noise from "
            "rollout.sa_solver.tau (and already ends on the clean prediction): set it to 0 / false"
            for key, value in kernel_only.items()
            if value
        ]
