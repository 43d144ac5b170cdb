"""Wan 2.2 through the whole loop on tiny pipelines built from its published configs: the
shipped recipes shrunk by `tiny_video_overrides` (3 frames, 3 steps, rule rewards), two
training steps each with the rollout-vs-replay parity exactly 0.

- T2V-A14B, LoRA on both experts (every step trained, so both experts' steps are): each
  expert's adapter moves; the export is one folder per expert, which `WanPipeline` loads
  (`load_into_transformer_2` for the low-noise one) and renders differently with.
- T2V-A14B, a full fine-tune of the low-noise expert only (`model.experts=low_noise`): only
  `transformer_2` moves; `checkpoint-final/transformer_2/` loads with
  `WanTransformer3DModel.from_pretrained` holding the trained weights.
- TI2V-5B, LoRA (per-token timesteps, the 48-channel VAE, 64x64)."""

from __future__ import annotations

import pytest
import torch
from support import (
    assert_two_steps_at_parity_zero,
    changed_weights,
    render_tiny_video,
    tiny_video_overrides,
    train_recipe_in_process,
)

A14B = "experiment/diffusion/wan_2_2/online_grpo_pickscore"
TI2V = "experiment/diffusion/wan_2_2/ti2v_5b_online_grpo_pickscore"
ALL_STEPS = ["rollout.sde_window.lo=0", "rollout.sde_window.hi=3", "rollout.sde_window.size=3"]
"""The recipe's window (one step of 1..3) trains only low-noise steps at 3 steps: train all."""


def test_lora_on_both_experts_trains_both_and_exports_one_loadable_adapter_each(tiny_wan22_dirs, tmp_path):
    from diffusers import WanPipeline

    model_dir = tiny_wan22_dirs["a14b"]
    trainer, initial = train_recipe_in_process(A14B, tiny_video_overrides(model_dir, tmp_path / "run", *ALL_STEPS))
    assert_two_steps_at_parity_zero(tmp_path / "run")
    moved = changed_weights(trainer, initial)
    assert moved and all("lora_" in name for name in moved)
    assert {name.split(".")[0] for name in moved} == {"transformer", "transformer_2"}
    lora = tmp_path / "run" / "checkpoint-final" / "lora"
    assert (lora / "README.md").exists() and "load_into_transformer_2=True" in (lora / "README.md").read_text()
    pipe = WanPipeline.from_pretrained(model_dir)
    before = render_tiny_video(pipe, 3)
    pipe.load_lora_weights(lora / "transformer")
    pipe.load_lora_weights(lora / "transformer_2", load_into_transformer_2=True)
    assert not torch.allclose(before, render_tiny_video(pipe, 3))


def test_full_fine_tune_of_the_low_noise_expert_moves_only_it_and_exports_it(tiny_wan22_dirs, tmp_path):
    from diffusers import WanTransformer3DModel

    overrides = tiny_video_overrides(
        tiny_wan22_dirs["a14b"],
        tmp_path / "run",
        *ALL_STEPS,
        "model.train_mode=full",
        "model.experts=low_noise",
        "eval.use_ema=false",
    )
    trainer, initial = train_recipe_in_process(A14B, overrides)
    assert_two_steps_at_parity_zero(tmp_path / "run")
    moved = changed_weights(trainer, initial)
    assert moved and {name.split(".")[0] for name in moved} == {"transformer_2"}
    final = tmp_path / "run" / "checkpoint-final"
    assert not (final / "transformer").exists()
    exported = WanTransformer3DModel.from_pretrained(final / "transformer_2").state_dict()
    trained = trainer.policy.transformer.transformer_2.state_dict()
    assert exported.keys() == trained.keys()
    assert all(torch.equal(exported[name], trained[name].to(exported[name].dtype)) for name in trained)


@pytest.mark.parametrize("recipe", [TI2V])
def test_ti2v_5b_trains_two_steps_with_its_own_vae(tiny_wan22_dirs, tmp_path, recipe):
    overrides = tiny_video_overrides(
        tiny_wan22_dirs["ti2v"], tmp_path / "run", "rollout.height=64", "rollout.width=64", *ALL_STEPS
    )
    trainer, initial = train_recipe_in_process(recipe, overrides)
    assert_two_steps_at_parity_zero(tmp_path / "run")
    assert trainer.policy.expand_timesteps and changed_weights(trainer, initial)
    assert (tmp_path / "run" / "checkpoint-final" / "lora" / "pytorch_lora_weights.safetensors").exists()
