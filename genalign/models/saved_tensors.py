"""What autograd keeps for backward through a module, counted on the meta device.

Where it fits: the memory plan (`preflight/memory_terms.py`) counts the activations reward
feedback keeps beyond the denoiser's: the VAE decode and the reward models' image towers run
under grad (docs/memory_plan.md). Their real classes, built on the meta device from the
published configs, run on meta inputs of the run's shapes; a `saved_tensors_hooks` pack hook
sees every tensor an op saves for its backward and this sums their storages once each. The
module's own weights and buffers are left out (the plan counts them as the model).
"""

from __future__ import annotations

from typing import Callable

import torch


def saved_tensor_bytes(
    module: torch.nn.Module, forward: Callable[[torch.Tensor], object], inputs: torch.Tensor
) -> float:
    """Bytes of the distinct storages autograd saves running `forward(inputs)` with grad to
    the inputs (the module's weights frozen, as reward feedback keeps the decoder and the
    reward model), its parameters' and buffers' storages excluded."""
    weights = {t.untyped_storage()._cdata for t in [*module.parameters(), *module.buffers()]}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            saved[storage._cdata] = max(saved.get(storage._cdata, 0), storage.nbytes())
        return tensor

    module.requires_grad_(False)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward(inputs.requires_grad_(True))
    return float(sum(saved.values()))
