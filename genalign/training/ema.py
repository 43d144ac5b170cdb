"""Exponential moving average of the trained weights, used for evaluation and checkpoints.

Flow-GRPO keeps an EMA of the LoRA weights with decay 0.9 updated every 8 optimizer steps
(ALGORITHMS §2.8). The EMA lives in float32 on the CPU-or-device of the parameters.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from genalign.training.distributed import copy_full_into


class EMA:
    def __init__(self, named_parameters: dict[str, torch.nn.Parameter], decay: float, update_every: int):
        self.parameters = named_parameters
        self.decay = decay
        self.update_every = update_every
        self.optimizer_steps = 0
        self.shadow = {name: p.detach().float().clone() for name, p in named_parameters.items()}

    @torch.no_grad()
    def on_optimizer_step(self) -> None:
        self.optimizer_steps += 1
        if self.optimizer_steps % self.update_every:
            return
        for name, param in self.parameters.items():
            self.shadow[name].mul_(self.decay).add_(param.detach().float(), alpha=1 - self.decay)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Swap the EMA weights in for the block (evaluation), then restore the live ones."""
        with torch.no_grad():
            live = {name: p.detach().clone() for name, p in self.parameters.items()}
            for name, param in self.parameters.items():
                param.copy_(self.shadow[name].to(param.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for name, param in self.parameters.items():
                    param.copy_(live[name])

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: t.clone() for name, t in self.shadow.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor], optimizer_steps: int) -> None:
        missing = sorted(set(self.shadow) - set(state))
        unexpected = sorted(set(state) - set(self.shadow))
        if missing or unexpected:
            raise ValueError(f"EMA state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        for name in self.shadow:
            copy_full_into(self.shadow[name], state[name])
        self.optimizer_steps = optimizer_steps
