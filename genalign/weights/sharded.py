"""Copying whole tensors into possibly sharded ones (FSDP2 DTensor shards).

Where it fits: loading LoRA or full weights into a policy (`lora.py`), and the float32
shadows (`shadow.py`), must write into whatever layout the module has: a plain tensor on one
process, a DTensor shard under FSDP2 (`training/distributed.py` shards; `full_state` there
gathers).
"""

from __future__ import annotations

import torch


@torch.no_grad()
def copy_full_into(target: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a whole tensor into `target`, which may be an FSDP2 shard (DTensor)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    full = full.to(device=target.device, dtype=target.dtype)
    if isinstance(target, DTensor):
        full = distribute_tensor(full, target.device_mesh, target.placements)
    target.copy_(full)
