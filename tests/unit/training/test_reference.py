"""`training/reference.py`: the KL reference, and where a full fine-tune's frozen copy lives."""

from __future__ import annotations

import torch

from genalign.rollout.ray_engine import place_policy
from genalign.training.reference import REFERENCE_ATTRIBUTE, ReferencePolicy


def test_a_full_fine_tunes_frozen_copy_moves_with_the_policys_modules(linear_policy):
    """The colocated engine parks the trainer's modules with `place_policy` while the rollout
    worker samples; the frozen copy must leave the device with them and come back with them.
    With one CPU and no GPU, the meta device stands in for "elsewhere": every module the
    placement moves, the reference copy included, ends up there."""
    reference = ReferencePolicy(linear_policy, train_mode="full")
    frozen = getattr(linear_policy, REFERENCE_ATTRIBUTE)
    assert frozen is not linear_policy.transformer and not any(p.requires_grad for p in frozen.parameters())
    with reference.active() as policy:  # the reference pass evaluates the copy, then the trained weights return
        assert policy.transformer is frozen
    assert linear_policy.transformer is not frozen

    moved = place_policy(linear_policy, torch.device("meta"))
    assert set(moved) == {"transformer", REFERENCE_ATTRIBUTE}
    assert all(p.is_meta for module in (frozen, linear_policy.transformer) for p in module.parameters())
    with reference.active() as policy:  # the same module object, wherever it was placed
        assert policy.transformer is frozen


def test_lora_keeps_no_copy(linear_policy):
    ReferencePolicy(linear_policy, train_mode="lora")
    assert not hasattr(linear_policy, REFERENCE_ATTRIBUTE)
    assert place_policy(linear_policy, torch.device("cpu")) == ("transformer",)
