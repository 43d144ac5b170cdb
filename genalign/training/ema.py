"""Exponential moving average of the trained weights, used for evaluation and the export.

Flow-GRPO (`flow_grpo/ema.py`, `scripts/train_sd3.py`) keeps an EMA of the LoRA weights with
decay 0.9, but warms the decay up as `min((1 + g) / (10 + g), 0.9)` (g = optimizer steps so
far), so the untrained adapter is forgotten within the first updates; and it calls the EMA
after every replay micro-batch with the current optimizer-step count g, updating when
`(g + 1) % 8 == 0`. With 4 micro-batches per optimizer step the update at a given g therefore
runs 4 times. `cadence="micro_batch"` (default) reproduces that exactly; `"optimizer_step"`
updates once per optimizer step, when the count reaches a multiple of `update_every`.
The EMA lives in float32 next to the parameters. Its `state_dict` holds its weights and its
counters, as diffusers' `EMAModel.state_dict` keeps its own step count: the checkpoint writes
the weights to ema.safetensors and the counters to trainer_state.json (`training/checkpointing.py`).
"""

from __future__ import annotations

from typing import Any, get_args

from genalign.training.config import EMACadence
from genalign.weights.shadow import ShadowWeights

CADENCES = get_args(EMACadence)


def ema_decay(optimizer_steps: int, decay: float, warmup: bool) -> float:
    """The decay used at optimizer-step count g: min((1 + g)/(10 + g), decay) with warm-up."""
    return min((1 + optimizer_steps) / (10 + optimizer_steps), decay) if warmup else decay


class EMA(ShadowWeights):
    def __init__(
        self,
        named_parameters: dict,
        decay: float,
        update_every: int,
        warmup: bool = True,
        cadence: EMACadence = "micro_batch",
    ):
        if cadence not in CADENCES:
            raise ValueError(f"actor.ema.cadence={cadence!r}: choose one of {list(CADENCES)}")
        super().__init__(named_parameters)
        self.decay = decay
        self.update_every = update_every
        self.warmup = warmup
        self.cadence = cadence
        self.optimizer_steps = 0
        self.updates = 0
        """EMA updates so far (the export card and log report it)."""
        self.initial_share = 1.0
        """Weight the starting values still carry in the EMA: the product of the decays used so
        far. Near 1 the EMA has barely moved from the untrained weights (a short run)."""

    def on_optimizer_step(self) -> None:
        self.optimizer_steps += 1
        if self.cadence == "optimizer_step" and self.optimizer_steps % self.update_every == 0:
            self._update()

    def on_micro_batch(self) -> None:
        if self.cadence == "micro_batch" and (self.optimizer_steps + 1) % self.update_every == 0:
            self._update()

    def _update(self) -> None:
        decay = ema_decay(self.optimizer_steps, self.decay, self.warmup)
        self.blend(decay)
        self.updates += 1
        self.initial_share *= decay

    def state_dict(self) -> dict[str, Any]:
        """`weights`: the float32 shadow tensors (what evaluation and the export use); the
        counters: optimizer steps seen, updates made, the starting weights' share."""
        return {
            "weights": super().state_dict(),
            "optimizer_steps": self.optimizer_steps,
            "updates": self.updates,
            "initial_share": self.initial_share,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_tensors(state["weights"], "EMA")
        self.optimizer_steps = int(state["optimizer_steps"])
        self.updates = int(state["updates"])
        self.initial_share = float(state["initial_share"])
