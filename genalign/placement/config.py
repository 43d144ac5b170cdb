"""`DistributedConfig`: Ray role budgets and torch.distributed strategy (docs/distributed.md)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RoleResources:
    num_gpus: float | str = 0
    """GPUs for this role; "auto" = what is left after the other roles."""
    num_cpus: float = 1
    """CPUs Ray reserves for each rollout worker (the trainer role does not read it)."""
    num_workers: int = 1
    """Rollout workers: must equal rollout.num_workers (the trainer role does not read it:
    torchrun sets its processes)."""
    devices: list[int] | None = None
    """Advanced: pin this role to these physical device indices."""


@dataclass
class ResourcesConfig:
    visible_devices: list[int] | None = None
    """Advanced: the physical device indices the roles may use; null: every visible GPU."""
    trainer: RoleResources = field(default_factory=RoleResources)
    rollout: RoleResources = field(default_factory=RoleResources)
    gpu_memory_gib: float | None = None
    """Memory of one GPU, in GiB, for the memory plan (`genalign config`, the check before the
    model loads); null = read it from the CUDA device, and skip the check without one. Set it
    to plan a run for another machine (e.g. 80 on a laptop composing an H100 run)."""


@dataclass
class TrainingStrategyConfig:
    strategy: str = "none"
    """"none" (one process), "ddp" or "fsdp2" (launched by torchrun)."""
    backend: str = "auto"
    """torch.distributed backend: "auto" (nccl on CUDA, gloo on CPU), "gloo", "nccl"."""
    timeout_s: float = 600.0
    """Seconds a rank waits in one collective before the job fails (torch.distributed's
    process-group timeout; NCCL's default, verl's nccl_timeout). A rank that died is noticed
    at once by torchrun; this bounds a rank that hangs or a lost node. Raise it when rank 0's
    checkpoint writes or evaluations take longer while the other ranks wait."""


@dataclass
class DistributedConfig:
    preset: str = "local"
    """Name of the preset layer that set these values (informational)."""
    colocated: bool = False
    """Rollout actors share the trainer's device and release memory before replay/backward."""
    cross_node: bool = False
    """Join an existing Ray cluster at $RAY_ADDRESS (never started or managed by genalign)."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    training: TrainingStrategyConfig = field(default_factory=TrainingStrategyConfig)
