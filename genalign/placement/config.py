"""`DistributedConfig`: Ray role budgets and torch.distributed strategy (docs/distributed.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from genalign.config.checks import positive_problems

TrainingStrategy = Literal["none", "ddp", "fsdp2"]
DistributedBackend = Literal["auto", "gloo", "nccl"]


@dataclass
class TrainerResources:
    """The trainer role: the launching process, or each torchrun rank; never a Ray actor."""

    RETIRED_KEYS: ClassVar[dict[str, str]] = {
        "num_cpus": "the trainer runs in the launching process (or each torchrun rank), not in a Ray actor, so Ray "
        "reserves no CPUs for it; distributed.resources.rollout.num_cpus sets each rollout worker's",
        "num_workers": "the trainer's processes are torchrun's ranks: launch `genalign train --nproc-per-node=N` (or "
        "`torchrun --nproc-per-node=N -m genalign.train`) with distributed.training.strategy=ddp or "
        "fsdp2; distributed.resources.rollout.num_workers counts rollout workers",
    }
    """Keys this role no longer has, with why: the loader's error for a config that sets one
    (a checkpoint's stored config drops them: they never did anything)."""
    num_gpus: float = 0
    """GPUs for the trainer: whole devices (the memory plan counts FSDP2 ranks from it when
    planning without torchrun's WORLD_SIZE); "auto" is the rollout role's alone."""
    devices: list[int] | None = None
    """Advanced: pin the trainer to these physical device indices."""


@dataclass
class RolloutResources:
    """The rollout role: `rollout.engine=ray` actors."""

    num_gpus: float | Literal["auto"] = 0
    """GPUs for the rollout workers together; "auto" = what is left after the trainer."""
    num_cpus: float = 1
    """CPUs Ray reserves for each rollout worker."""
    num_workers: int = 1
    """Rollout workers (Ray actors): must equal rollout.num_workers."""
    devices: list[int] | None = None
    """Advanced: pin the rollout workers to these physical device indices."""


@dataclass
class ResourcesConfig:
    visible_devices: list[int] | None = None
    """Advanced: the physical device indices the roles may use; null: every visible GPU."""
    trainer: TrainerResources = field(default_factory=TrainerResources)
    rollout: RolloutResources = field(default_factory=RolloutResources)
    gpu_memory_gib: float | None = None
    """Memory of one GPU, in GiB, for the memory plan (`genalign config`, the check before the
    model loads); null = read it from the CUDA device, and skip the check without one. Set it
    to plan a run for another machine (e.g. 80 on a laptop composing an H100 run)."""
    gpu_memory_fraction: float | None = 0.9
    """The share of a GPU's memory a role's planned peak (tensors, allocator headroom, CUDA
    context) may fill; a plan above it is refused before the model loads. The rest is the
    margin for what the plan does not model (docs/memory_plan.md gives that share per
    family). null: no memory check, and a model the plan cannot describe runs unplanned."""

    def problems(self) -> list[str]:
        """The memory check's inputs (the devices and GPU counts against this machine are
        placement/resources.py's plan)."""
        problems = []
        fraction, gib = self.gpu_memory_fraction, self.gpu_memory_gib
        if fraction is not None and not 0 < fraction <= 1:
            problems.append(
                f"distributed.resources.gpu_memory_fraction must be in (0, 1] (the share of a GPU a "
                f"planned peak may fill) or null (no memory check), got {fraction}"
            )
        if gib is not None and gib <= 0:
            problems.append(f"distributed.resources.gpu_memory_gib must be > 0 (one GPU's memory) or null, got {gib}")
        return problems


@dataclass
class TrainingStrategyConfig:
    strategy: TrainingStrategy = "none"
    """"none" (one process), "ddp" or "fsdp2" (launched by torchrun)."""
    backend: DistributedBackend = "auto"
    """torch.distributed backend: "auto" (nccl on CUDA, gloo on CPU), "gloo", "nccl"."""
    timeout_s: float = 600.0
    """Seconds a rank waits in one collective before the job fails (torch.distributed's
    process-group timeout; NCCL's default, verl's nccl_timeout). A rank that died is noticed
    at once by torchrun; this bounds a rank that hangs or a lost node. Raise it when rank 0's
    checkpoint writes or evaluations take longer while the other ranks wait."""

    def problems(self) -> list[str]:
        return positive_problems({"distributed.training.timeout_s": self.timeout_s})


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

    def problems(self) -> list[str]:
        return self.resources.problems() + self.training.problems()
