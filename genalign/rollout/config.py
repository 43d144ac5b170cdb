"""`RolloutConfig`: how each training step samples trajectories."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    width: int = 512
    num_steps: int = 10
    """Denoising steps of the training rollout."""
    guidance_scale: float = 4.5
    """CFG scale used in rollout and (identically) in replay; 1.0 disables CFG."""
    noise_level: float = 0.7
    """SDE noise level a (Flow-GRPO); 0 reproduces the Euler ODE sampler."""
    kernel: str = "flow_sde"
    """Transition kernel: "flow_sde" (Flow-GRPO, ALGORITHMS §2.2)."""
    same_initial_noise: bool = False
    """Share x_T within a group (DanceGRPO) instead of distinct noise (Flow-GRPO default)."""
    engine: str = "local"
    """"local" (in-process) or "ray" (rollout actors)."""
    num_workers: int = 1
    """Ray rollout actors when engine=ray."""
