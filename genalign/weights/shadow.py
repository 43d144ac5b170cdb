"""`ShadowWeights`: a float32 copy of the trained weights that can be swapped in for a block.

Where it fits: the evaluation EMA (`ema.py`) and DiffusionNFT's old (sampling) policy
(`algorithms/nft.py`) are both a second set of values for the trained tensors, blended
towards the live ones and swapped in temporarily; this is that mechanism, once. Swapping
values (rather than holding a second peft adapter) works the same for LoRA and full
fine-tuning and for any model family.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from genalign.weights.sharded import copy_full_into


class ShadowWeights:
    def __init__(self, named_parameters: dict[str, torch.nn.Parameter]):
        self.parameters = named_parameters
        self.shadow = {name: p.detach().float().clone() for name, p in named_parameters.items()}

    @torch.no_grad()
    def blend(self, decay: float) -> None:
        """shadow ← decay·shadow + (1 − decay)·live."""
        for name, param in self.parameters.items():
            self.shadow[name].mul_(decay).add_(param.detach().float(), alpha=1 - decay)

    @torch.no_grad()
    def copy_live(self) -> None:
        """shadow ← live (a hard copy: DPO's reference refresh)."""
        for name, param in self.parameters.items():
            self.shadow[name].copy_(param.detach().float())

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Swap the shadow weights in for the block, then restore the live ones."""
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

    def load_tensors(self, state: dict[str, torch.Tensor], what: str) -> None:
        """Copy `state` into the shadow; `what` names it in the mismatch error."""
        missing = sorted(set(self.shadow) - set(state))
        unexpected = sorted(set(state) - set(self.shadow))
        if missing or unexpected:
            raise ValueError(f"{what} state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        for name in self.shadow:
            copy_full_into(self.shadow[name], state[name])


STEPS_KEY = "optimizer_steps"
"""The optimizer-step count saved beside an algorithm's shadow weights."""


def shadow_state(shadow: ShadowWeights, prefix: str, optimizer_steps: int) -> dict[str, torch.Tensor]:
    """An algorithm's state (`Algorithm.state_dict`) of one shadow copy and a step count:
    the shadow tensors under `prefix`, the count under STEPS_KEY."""
    return {
        **{prefix + name: t for name, t in shadow.state_dict().items()},
        STEPS_KEY: torch.tensor([optimizer_steps], dtype=torch.int64),
    }


def load_shadow_state(
    shadow: ShadowWeights, prefix: str, state: dict[str, torch.Tensor], what: str, algorithm: str
) -> int:
    """Load `shadow_state` output into `shadow`; returns the step count. `what` names the copy
    in a mismatch error, `algorithm` the algorithm.name whose checkpoints carry it."""
    if STEPS_KEY not in state:
        raise ValueError(
            f"{what} state has no {STEPS_KEY}: the checkpoint was not written by an algorithm.name={algorithm} run"
        )
    shadow.load_tensors({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}, what)
    return int(state[STEPS_KEY][0])
