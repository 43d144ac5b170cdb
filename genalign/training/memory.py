"""Peak GPU memory per training step (`gpu_peak_allocated_gib` in metrics.csv and the report).

Where it fits: the trainer calls `start()` before a step and `metrics()` after it. On CUDA
that is `torch.cuda.reset_peak_memory_stats` then `torch.cuda.max_memory_allocated`: the most
memory tensors held at any moment of that step (rollout, rewards, replay and update), the
figure people look at first when a run is near the limit. On a CPU run there is nothing to
measure and no column is written. The reader and the reset are injectable, so the code path
is tested without a GPU.
"""

from __future__ import annotations

from typing import Callable

import torch

GIB = 2**30
COLUMN = "gpu_peak_allocated_gib"


class PeakMemory:
    """Per-step peak of allocated CUDA memory on `device`, in GiB."""

    def __init__(
        self, device: torch.device | str, read: Callable[[], int] | None = None, reset: Callable[[], None] | None = None
    ):
        device = torch.device(device)
        self.enabled = device.type == "cuda" or read is not None
        self.read = read or (lambda: torch.cuda.max_memory_allocated(device))
        self.reset = reset or (lambda: torch.cuda.reset_peak_memory_stats(device))

    def start(self) -> None:
        """Forget the previous peak: the next `metrics()` covers only what runs after this."""
        if self.enabled:
            self.reset()

    def metrics(self) -> dict[str, float]:
        """{COLUMN: peak GiB since `start()`}, or {} on the CPU."""
        return {COLUMN: self.read() / GIB} if self.enabled else {}
