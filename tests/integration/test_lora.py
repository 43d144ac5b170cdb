"""LoRA on the tiny SD3 transformer: placement on the family's targets, zero change at init,
reference mode, trainable state, and an export that diffusers' `load_lora_weights` loads
with the same alpha/r scale."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered

from genalign.models.config import LoraConfig
from genalign.models.sd3 import SD3_LORA_TARGETS, SD3Policy
from genalign.weights.lora import (
    apply_lora,
    export_lora_for_diffusers,
    load_trainable_state_dict,
    reference_mode,
    state_fingerprint,
    trainable_state_dict,
)

LORA = LoraConfig(rank=4, alpha=8.0, init="gaussian")  # alpha != r: the scale 2 must survive export


@pytest.fixture
def policy(tiny_sd3_dir) -> SD3Policy:
    """A fresh policy per test: the tests mutate the adapter."""
    return SD3Policy.from_pretrained(tiny_sd3_dir, max_sequence_length=8)


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(2, 4, 8, 8, generator=generator),
        "timestep": torch.tensor([700.0, 300.0]),
        "encoder_hidden_states": torch.randn(2, 85, 32, generator=generator),
        "pooled_projections": torch.randn(2, 64, generator=generator),
    }


@torch.no_grad()
def output(transformer: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    return transformer(**inputs(seed), return_dict=False)[0]


def perturb_lora_b(transformer: torch.nn.Module) -> None:
    """B is zero at init; give it values so the adapter changes the output."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in transformer.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))


def test_adapter_sits_on_every_target_and_is_all_that_trains(policy):
    transformer = policy.transformer
    base = output(transformer)
    apply_lora(transformer, LORA, policy.lora_target_modules)
    targeted = {
        name
        for name, _ in transformer.named_modules()
        if any(name.endswith("." + target) for target in SD3_LORA_TARGETS)
    }
    trainable = {name for name, p in transformer.named_parameters() if p.requires_grad}
    assert trainable == {f"{m}.lora_{ab}.default.weight" for m in targeted for ab in "AB"}
    # 2 blocks x 8 projections, minus to_add_out of the last (context_pre_only) block
    assert len(targeted) == 15
    assert torch.equal(output(transformer), base)  # gaussian init: B = 0


def test_reference_mode_is_the_base_model_and_restores_afterwards(policy):
    transformer = policy.transformer
    base = output(transformer)
    apply_lora(transformer, LORA, policy.lora_target_modules)
    perturb_lora_b(transformer)
    tuned = output(transformer)
    assert (tuned - base).abs().max() > 1e-3
    with reference_mode(transformer):
        torch.testing.assert_close(output(transformer), base, rtol=0, atol=0)
    torch.testing.assert_close(output(transformer), tuned, rtol=0, atol=0)
    assert all(p.requires_grad for n, p in transformer.named_parameters() if ".lora_" in n)


def test_trainable_state_round_trip_and_fingerprint(policy, tiny_sd3_dir):
    apply_lora(policy.transformer, LORA, policy.lora_target_modules)
    perturb_lora_b(policy.transformer)
    state = trainable_state_dict(policy.transformer)
    fingerprint = state_fingerprint(state)
    tuned = output(policy.transformer)

    other = SD3Policy.from_pretrained(tiny_sd3_dir, max_sequence_length=8)  # another "process"
    apply_lora(other.transformer, LORA, other.lora_target_modules)
    assert state_fingerprint(trainable_state_dict(other.transformer)) != fingerprint
    assert sorted(trainable_state_dict(other.transformer)) == sorted(state)
    load_trainable_state_dict(other.transformer, state)
    assert state_fingerprint(trainable_state_dict(other.transformer)) == fingerprint
    torch.testing.assert_close(output(other.transformer), tuned, rtol=0, atol=0)

    with pytest.raises(ValueError, match="missing"):
        load_trainable_state_dict(other.transformer, dict(list(state.items())[1:]))


def test_exported_lora_loads_into_diffusers_with_the_same_scale(policy, tiny_sd3_dir, tmp_path):
    from diffusers import StableDiffusion3Pipeline

    apply_lora(policy.transformer, LORA, policy.lora_target_modules)
    perturb_lora_b(policy.transformer)
    ours = output(policy.transformer)
    out_dir = export_lora_for_diffusers(policy.transformer, tmp_path / "lora", LORA, policy.diffusers_pipeline)

    weights = out_dir / "pytorch_lora_weights.safetensors"
    with safe_open(str(weights), "pt") as handle:
        keys = list(handle.keys())
        metadata = json.loads(handle.metadata()["lora_adapter_metadata"])
    assert all(k.startswith("transformer.") for k in keys) and len(keys) == 30
    assert metadata["transformer.r"] == 4 and metadata["transformer.lora_alpha"] == 8.0

    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3_dir)
    base = output(pipe.transformer)
    pipe.load_lora_weights(out_dir)
    loaded = output(pipe.transformer)
    # without the adapter metadata diffusers would infer alpha = r (scale 1 instead of 2) and
    # miss `ours` by ~0.06 here, far outside this tolerance
    assert_close_reordered(loaded, ours, length=TINY_REDUCTION, depth=TINY_DEPTH)  # diffusers' LoRA path vs peft's
    assert (loaded - base).abs().max() > 1e-3


def test_export_refuses_a_config_that_differs_from_the_adapter(policy, tmp_path):
    apply_lora(policy.transformer, LORA, policy.lora_target_modules)
    with pytest.raises(ValueError, match="model.lora"):
        export_lora_for_diffusers(policy.transformer, tmp_path, LoraConfig(rank=8, alpha=8.0))
