"""The memory plan's counted items against the torch code that allocates them, on the CPU.

Each constant the plan states about torch is checked here by watching the allocations:
AdamW's foreach step keeps one float32 copy of the trained parameters' size at once, and
autocast ends a forward holding a compute-dtype cast of every float32 weight that requires
grad. Sizes are exact byte counts of this process's tensors, so no tolerance is needed beyond
the few scalar tensors torch may create.
"""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from genalign.preflight import memory_math as mm


class NewStorages(TorchDispatchMode):
    """Bytes of the storages created under the mode that are alive now, and their peak."""

    def __init__(self):
        super().__init__()
        self.live, self.peak, self.storages = 0, 0, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() not in self.storages:
                storage = value.untyped_storage()
                self.storages[storage.data_ptr()] = weakref.ref(value)
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
                weakref.finalize(value, self._release, storage.data_ptr(), storage.nbytes())
        return out

    def _release(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.storages.pop(key, None)

    def alive(self, dtype: torch.dtype, shapes: set[tuple[int, ...]]) -> int:
        """Live tensors created under the mode of `dtype` with one of `shapes`."""
        return sum(
            1
            for ref in self.storages.values()
            if (t := ref()) is not None and t.dtype == dtype and tuple(t.shape) in shapes
        )


def _params() -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape)) for shape in ((64, 32), (128,), (16, 16, 4))]


def test_adamw_foreach_step_holds_one_float32_copy_of_the_trained_parameters():
    """`ADAMW_TEMPORARY_BYTES`: torch's _multi_tensor_adam computes exp_avg_sq.sqrt() for every
    parameter at once (one list), 4 bytes a parameter, on top of the state."""
    params = _params()
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)  # CUDA's default
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()  # the first step creates the state (counted as AdamW state, 8 bytes a parameter)
    watch = NewStorages()
    with watch:
        optimizer.step()
    temporary = sum(p.numel() for p in params) * mm.ADAMW_TEMPORARY_BYTES
    assert temporary <= watch.peak <= temporary + 64  # + a scalar step tensor or so
    assert mm.adamw_temporary_bytes(1000) == 4000


def test_autocast_ends_a_forward_holding_a_cast_of_every_trained_weight():
    """`autocast_cache_bytes`: autocast caches its cast of every float32 leaf that requires grad
    until the region ends (and autograd keeps them for backward), so at the end of a forward
    the trained weights exist once more at the compute dtype; frozen weights already at the
    compute dtype are not cast."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(4)])
    shapes = {(32, 32)}
    watch = NewStorages()
    with watch, torch.autocast("cpu", dtype=torch.bfloat16):
        out = layers(torch.randn(8, 32))
        assert watch.alive(torch.bfloat16, shapes) == 4  # every trained weight, cast once
    del out
    frozen = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(4)]).to(torch.bfloat16).requires_grad_(False)
    watch = NewStorages()
    with watch, torch.autocast("cpu", dtype=torch.bfloat16):
        frozen(torch.randn(8, 32))
        assert watch.alive(torch.bfloat16, shapes) == 0
    assert mm.autocast_cache_bytes(1000, 2) == 2000 and mm.autocast_cache_bytes(1000, 4) == 0.0
