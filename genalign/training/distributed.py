"""torch.distributed and device plumbing: the only module that touches those APIs.

Where it fits: around the loop when `distributed.training.strategy` is `ddp` or `fsdp2`
(launched by `torchrun --nproc_per_node=N -m genalign.train ...`). The trainer calls:
`init_distributed` once (rank facts from torchrun's RANK / WORLD_SIZE / LOCAL_RANK
environment, never from YAML), `wrap_for_training` on the denoiser, `shard_groups` to take
this rank's prompt groups, `gather_scores` so advantages see whole groups, and
`full_trainable_state` / `barrier` around rank-0-only checkpoints. With strategy `none`
every helper is the identity, so the loop has one code path.

Numerics: each rank holds `1/world_size` of the step's groups and runs
`gradient_accumulation_steps / world_size` micro-batches per optimizer step; DDP and FSDP2
average gradients over ranks, which makes a k-rank step the same update as the 1-process
step over the same global batch (to fp32 reduction order).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- devices
def visible_cuda_device_count() -> int:
    """CUDA devices this process may use (0 without CUDA); does not initialise CUDA."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def release_device_memory() -> None:
    """Return cached accelerator memory to the driver (colocated rollout before backward)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def use_cuda_device(local_index: int | None) -> None:
    """Make `cuda` mean this process's device (torchrun LOCAL_RANK or a pinned trainer device)."""
    if local_index is not None and torch.cuda.is_available():
        torch.cuda.set_device(local_index)
