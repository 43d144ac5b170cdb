"""`AlgorithmConfig`: the policy-gradient objective and its advantage estimator."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AdvantageConfig:
    """Group normalisation (ALGORITHMS §2.4)."""

    per_prompt: bool = True
    """Normalise within each prompt group; false = over the whole batch."""
    global_std: bool = True
    """Divide by the std of the whole batch instead of the group's (Flow-GRPO SD3 default)."""
    std: str = "population"
    """"population" (numpy, ddof=0: Flow-GRPO) or "unbiased" (torch, ddof=1: DanceGRPO/verl)."""
    eps: float = 1e-4
    normalize_by_std: bool = True
    """False: mean-centering only (Dr.GRPO style)."""


@dataclass
class AlgorithmConfig:
    name: str = "grpo"
    """"grpo" (Flow-GRPO clipped surrogate)."""
    clip_range: float = 1e-4
    adv_clip_max: float = 5.0
    kl_beta: float = 0.0
    """Weight of the KL to the reference (adapter-disabled) policy; 0 skips the reference pass."""
    kl_type: str = "latent_mean"
    """"latent_mean": mean((mu - mu_ref)^2) / (2 s^2) as in Flow-GRPO code (ALGORITHMS §2.5);
    "velocity": mean((v - v_ref)^2)."""
    timestep_fraction: float = 0.99
    """Train the first int(num_steps * fraction) stochastic steps of each trajectory."""
    detach_uncond: bool = True
    """In replay with CFG, stop the gradient through the unconditional branch v_u: the update
    then moves v_u + w(v_c − v_u) only through v_c (gradient scale w on the conditional
    prediction). False sends it through both branches, v_u with scale 1 − w (−3.5 at w = 4.5),
    which also trains the unconditional model. The forward value — and so every log-prob and
    ratio — is the same either way. Replay always uses the rollout's guidance scale (the
    log-prob must be of the policy that sampled); for CFG-free training sample with
    rollout.guidance_scale=1."""
    drop_zero_advantage: bool = True
    """Drop samples whose advantage is exactly 0 (constant-reward groups) before replay, as
    Flow-GRPO does: they carry no policy gradient but would still dilute the policy loss while
    the KL term applies in full. Random dropped samples are put back until the kept count
    divides into the step's micro-batches, whose number stays fixed (they get smaller)."""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
