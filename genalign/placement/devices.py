"""CUDA device helpers: how many devices this process sees, which one `cuda` means, and
returning cached memory to the driver.

Where it fits: placement counts devices (`resources.environment_facts`), torch.distributed
pins each rank's device (`training/distributed.py`), and a colocated Ray rollout worker gives
its cache back before the trainer's backward (`rollout/ray_engine.py`).
"""

from __future__ import annotations

import torch


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
