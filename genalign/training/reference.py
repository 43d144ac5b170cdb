"""The reference policy for KL terms, without a second copy when training LoRA.

LoRA: the reference is the same denoiser with the adapter disabled (docs/algorithms.md §2.5, §2.8);
this needs the base weights frozen, which LoRA guarantees. Full fine-tuning: the base weights
move, so a frozen copy of the initial denoiser is kept and swapped in for the reference pass.

The copy is one of the trainer's modules: it hangs on the policy (`REFERENCE_ATTRIBUTE`), so
whatever places the policy's modules places it too. Under the colocated Ray preset the engine
parks the trainer's modules on the CPU while the rollout worker samples on the shared device
(`rollout/ray_engine.place_policy`), the copy with them, and brings them back for replay and
backward, where the KL pass uses it (docs/memory_plan.md counts it in the train phase only).
The worker's copy cannot stand in for it: the worker samples with the current weights, the KL
is to the initial ones.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator

from genalign.models.base import Policy
from genalign.training.lora import reference_mode

REFERENCE_ATTRIBUTE = "reference_transformer"
"""The policy attribute that holds a full fine-tune's frozen reference copy."""


class ReferencePolicy:
    def __init__(self, policy: Policy, train_mode: str):
        self.policy = policy
        self.train_mode = train_mode
        self._frozen_copy = None
        if train_mode == "full":
            # the trained copy holds float32 masters; the frozen one only computes, so it keeps
            # the compute dtype (half the memory in bf16; the same autocast numerics)
            frozen = copy.deepcopy(policy.transformer).requires_grad_(False).eval()
            self._frozen_copy = frozen.to(dtype=policy.dtype)
            setattr(policy, REFERENCE_ATTRIBUTE, self._frozen_copy)  # placed with the policy's modules

    @contextmanager
    def active(self) -> Iterator[Policy]:
        """Within the block, `policy.velocity` evaluates the reference weights."""
        if self._frozen_copy is None:
            with reference_mode(self.policy.transformer):
                yield self.policy
            return
        trained = self.policy.transformer
        self.policy.transformer = self._frozen_copy
        try:
            yield self.policy
        finally:
            self.policy.transformer = trained
