"""HunyuanVideo 1.5 through the whole loop on the tiny pipeline built from its published configs:
the shipped recipe shrunk by `tiny_video_overrides` (5 frames, 3 steps, rule rewards), two
training steps each with the rollout-vs-replay parity exactly 0.

- LoRA: only the adapter moves; `checkpoint-final/lora/` loads with the pipeline's
  `transformer.load_lora_adapter` (HunyuanVideo15Pipeline has no `load_lora_weights`), as its
  model card says, and changes what the pipeline renders.
- Full fine-tune: the transformer's weights move; `checkpoint-final/transformer/` loads with
  `HunyuanVideo15Transformer3DModel.from_pretrained` holding the trained weights."""

from __future__ import annotations

import torch
from support import assert_two_steps_at_parity_zero, changed_tensors, tiny_video_overrides, train_recipe_in_process

from genalign.preflight.load import load_config

RECIPE = "experiment/diffusion/hunyuan_video15/online_grpo_pickscore"
TINY = ("model.num_frames=5", "model.max_sequence_length=48", "rollout.sde_window.hi=3", "rollout.sde_window.size=3")
"""5 frames (the VAE's 4k + 1), the Qwen stream at 48 tokens (the template leaves the prompt
room), and the recipe's window of 8 of the first 9 steps shrunk to the tiny run's 3 steps."""


def render(pipe) -> torch.Tensor:
    return pipe(
        'a sign that says "hi"',
        height=32,
        width=32,
        num_frames=5,
        num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).frames


def test_the_recipe_composes_with_unirls_settings():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path) == (
        "hunyuan_video15",
        "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
    )
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level, cfg.rollout.n) == (
        16,
        1.0,
        0.25,
        24,
    )
    assert (cfg.rollout.sde_window.size, cfg.rollout.sde_window.lo, cfg.rollout.sde_window.hi) == (8, 0, 9)
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, len(cfg.model.lora.target_modules)) == (64, 64.0, 12)
    assert cfg.algorithm.kl_beta == 0.0 and cfg.algorithm.advantage.global_std and cfg.actor.lr == 1e-5


def test_lora_trains_two_steps_and_its_export_loads_into_the_pipelines_transformer(tiny_hunyuan_video15_dir, tmp_path):
    from diffusers import HunyuanVideo15Pipeline

    trainer, initial = train_recipe_in_process(RECIPE, tiny_video_overrides(tiny_hunyuan_video15_dir, tmp_path, *TINY))
    assert_two_steps_at_parity_zero(tmp_path)
    moved = changed_tensors(trainer, initial)
    assert moved and all("lora_" in name for name in moved)
    lora = tmp_path / "checkpoint-final" / "lora"
    assert "pipe.transformer.load_lora_adapter(" in (lora / "README.md").read_text()
    pipe = HunyuanVideo15Pipeline.from_pretrained(tiny_hunyuan_video15_dir)
    pipe.vae.enable_slicing()
    before = render(pipe)
    pipe.transformer.load_lora_adapter(lora, use_safetensors=True)
    assert not torch.allclose(before, render(pipe))


def test_full_fine_tune_trains_two_steps_and_exports_the_transformer(tiny_hunyuan_video15_dir, tmp_path):
    from diffusers import HunyuanVideo15Transformer3DModel

    overrides = tiny_video_overrides(
        tiny_hunyuan_video15_dir, tmp_path, *TINY, "model.train_mode=full", "eval.use_ema=false"
    )
    trainer, initial = train_recipe_in_process(RECIPE, overrides)
    assert_two_steps_at_parity_zero(tmp_path)
    assert changed_tensors(trainer, initial)
    exported = HunyuanVideo15Transformer3DModel.from_pretrained(tmp_path / "checkpoint-final" / "transformer")
    trained = trainer.policy.transformer.state_dict()
    assert exported.state_dict().keys() == trained.keys()
    assert all(torch.equal(exported.state_dict()[n], trained[n].to(exported.dtype)) for n in trained)
