"""Two denoiser experts (Wan 2.2 A14B): which train, how their tensors are named and split for
export, the config checks of `model.experts` / `model.low_noise_guidance_scale`, and the memory
plan counting both experts (the trained ones as trained, the other frozen)."""

from __future__ import annotations

import pytest
import torch

from genalign.config.errors import ConfigError
from genalign.models.architecture import load_architecture
from genalign.models.experts import DenoiserExperts, denoiser_parts, part_state, trained_components
from genalign.models.spec import family_spec
from genalign.preflight.load import load_config
from genalign.preflight.memory_terms import plan_terms

A14B = "experiment/diffusion/wan_2_2/online_grpo_pickscore"
EXPERT = 14_288_491_584
"""Parameters of one A14B expert (its architecture file built on the meta device)."""


def test_model_experts_names_the_pipeline_components_that_train():
    both = ("transformer", "transformer_2")
    assert trained_components("both", both) == both
    assert trained_components("high_noise", both) == ("transformer",)
    assert trained_components("low_noise", both) == ("transformer_2",)
    assert trained_components("both", ("transformer",)) == ("transformer",)
    with pytest.raises(ValueError, match="model.experts='middle'"):
        trained_components("middle", both)


def test_experts_module_names_each_tensor_by_its_component_and_splits_them_back():
    high, low = torch.nn.Linear(2, 2), torch.nn.Linear(2, 3)
    experts = DenoiserExperts({"transformer": high, "transformer_2": low}, ("transformer_2",))
    assert sorted(dict(experts.named_parameters())) == [
        "transformer.bias",
        "transformer.weight",
        "transformer_2.bias",
        "transformer_2.weight",
    ]
    assert denoiser_parts(experts) == {"transformer_2": low}
    state = {name: param.detach() for name, param in experts.named_parameters()}
    assert sorted(part_state(state, experts, "transformer_2")) == ["bias", "weight"]
    assert part_state(state, experts, "transformer_2")["weight"].shape == (3, 2)
    assert denoiser_parts(high) == {"transformer": high} and part_state(state, high, "transformer") is state
    with pytest.raises(ValueError, match="subset"):
        DenoiserExperts({"transformer": high}, ("transformer_2",))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.experts=low_noise", "model.experts=low_noise: model.family=sd3 has one denoiser"),
        ("model.low_noise_guidance_scale=3.0", "model.low_noise_guidance_scale=3.0: model.family=sd3"),
    ],
)
def test_expert_options_on_a_family_without_experts_are_refused_before_loading(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("experiment/diffusion/sd3_5/online_grpo_ocr", [override])


def test_a_low_noise_guidance_scale_below_one_is_refused():
    with pytest.raises(ConfigError, match="model.low_noise_guidance_scale must be >= 1"):
        load_config(A14B, ["model.low_noise_guidance_scale=0.5"])


def test_the_architecture_file_holds_both_experts_alike():
    arch = load_architecture(family_spec("wan"), "Wan-AI/Wan2.2-T2V-A14B-Diffusers")
    assert arch.denoisers == ("transformer", "transformer_2")
    assert arch.component("transformer").parameters == arch.component("transformer_2").parameters == EXPERT
    assert (arch.hidden_size, arch.num_layers) == (5120, 40)
    ti2v = load_architecture(family_spec("wan"), "Wan-AI/Wan2.2-TI2V-5B-Diffusers")
    assert ti2v.denoisers == ("transformer",) and ti2v.latent_channels == 48
    assert ti2v.geometry.image_tokens(704, 1280, 121) == 31 * 22 * 40  # 16 pixels a latent, 2x2 patches


@pytest.mark.parametrize(
    ("overrides", "trained_experts", "frozen"),
    [
        ([], 2, 2 * EXPERT),  # LoRA on both: both experts' weights frozen under their adapters
        (["model.experts=high_noise"], 1, 2 * EXPERT),
        (["model.train_mode=full", "model.experts=low_noise"], None, EXPERT),  # one expert trains in full
    ],
)
def test_the_memory_plan_counts_both_experts(overrides, trained_experts, frozen):
    terms = plan_terms(load_config(A14B, overrides))
    lines = dict(terms.frozen)
    # bfloat16: 2 bytes a parameter, plus the experts' rotary tables (1 MB)
    assert lines["transformer base weights (bfloat16)"] == pytest.approx(frozen * 2, rel=1e-4)
    assert not any(name.startswith("transformer_2") for name in lines)  # not counted twice
    if trained_experts is None:
        assert terms.trained == EXPERT
    else:
        one = plan_terms(load_config(A14B, ["model.experts=low_noise"])).trained
        assert terms.trained == trained_experts * one
