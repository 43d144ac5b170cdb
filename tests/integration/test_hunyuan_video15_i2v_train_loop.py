"""HunyuanVideo 1.5 I2V through the whole loop on the tiny pipeline built from its published
configs: the shipped recipe shrunk by `tiny_video_overrides` (5 frames of 32x32, a size bucket of
the tiny transformer's target_size; 3 steps, rule rewards), first frames from the shipped
image-to-video prompt set rebuilt at 32x32, two training steps each with the rollout-vs-replay
parity exactly 0.

- LoRA: only the adapter moves; `checkpoint-final/lora/` loads with the pipeline's
  `transformer.load_lora_adapter` (HunyuanVideo15ImageToVideoPipeline has no
  `load_lora_weights`), as its model card says, and changes what the pipeline renders from a
  first frame; the evaluation sheet starts each row with its first frame.
- Full fine-tune (slow pass): `checkpoint-final/transformer/` loads with
  `HunyuanVideo15Transformer3DModel.from_pretrained` into the pipeline, holding the trained weights."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from support import (
    assert_two_steps_at_parity_zero,
    changed_tensors,
    i2v_manifests,
    tiny_video_overrides,
    train_recipe_in_process,
)

from genalign.preflight.load import load_config
from genalign.preflight.memory_plan import estimate_memory

RECIPE = "experiment/diffusion/hunyuan_video15/i2v_online_grpo_pickscore"
TINY = ("model.num_frames=5", "model.max_sequence_length=48", "rollout.sde_window.hi=3", "rollout.sde_window.size=3")
"""5 frames (the VAE's 4k + 1), the Qwen stream at 48 tokens (the template leaves the prompt
room), and the recipe's window of 8 of the first 9 steps shrunk to the tiny run's 3 steps."""


def overrides(model_dir, out, i2v_set, *extra) -> list[str]:
    return tiny_video_overrides(
        model_dir,
        out,
        *i2v_manifests(i2v_set),
        *TINY,
        *extra,
    )


def render(pipe, image: Image.Image) -> torch.Tensor:
    return pipe(
        image=image,
        prompt="the orange circle spins",
        num_frames=5,
        num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).frames


def test_the_recipe_composes_with_unirls_settings_and_plans_one_80_gb_card():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path) == (
        "hunyuan_video15_i2v",
        "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v",
    )
    assert (cfg.rollout.height, cfg.rollout.width, cfg.data.manifest) == (640, 640, "datasets/i2v/train_640.jsonl")
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level, cfg.rollout.n) == (
        16,
        1.0,
        0.25,
        24,
    )
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, len(cfg.model.lora.target_modules)) == (64, 64.0, 12)
    assert cfg.algorithm.kl_beta == 0.0 and cfg.algorithm.advantage.global_std and cfg.actor.lr == 1e-5
    plan = estimate_memory(cfg)
    assert plan.roles[0].peak_bytes / 2**30 == pytest.approx(43.3, abs=0.05)  # what the recipe's header says


def test_lora_trains_two_steps_and_its_export_loads_into_the_pipelines_transformer(
    tiny_hunyuan_video15_i2v_dir, i2v_set, first_frame, tmp_path
):
    from diffusers import HunyuanVideo15ImageToVideoPipeline

    trainer, initial = train_recipe_in_process(RECIPE, overrides(tiny_hunyuan_video15_i2v_dir, tmp_path, i2v_set))
    assert_two_steps_at_parity_zero(tmp_path)
    moved = changed_tensors(trainer, initial)
    assert moved and all("lora_" in name for name in moved)
    lora = tmp_path / "checkpoint-final" / "lora"
    card = (lora / "README.md").read_text()
    assert "pipe.transformer.load_lora_adapter(" in card and "image-to-video" in card
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(tiny_hunyuan_video15_i2v_dir)
    pipe.vae.enable_slicing()
    before = render(pipe, first_frame)
    pipe.transformer.load_lora_adapter(lora, use_safetensors=True)
    assert not torch.allclose(before, render(pipe, first_frame))
    # the evaluation's frame strip: each row its first frame, then the video's 5 frames
    with Image.open(tmp_path / "eval_epoch_2" / "contact_sheet.png") as sheet:
        assert sheet.width == 6 * (sheet.width // 6) and sheet.width // 6 >= 32


@pytest.mark.slow  # ~25 s: the LoRA loop above is its fast form (the same loop at parity 0), and the full
# export path is the T2V family's (the same transformer class; its full fine-tune stays in the default suite)
def test_full_fine_tune_trains_two_steps_and_exports_the_transformer(tiny_hunyuan_video15_i2v_dir, i2v_set, tmp_path):
    from diffusers import HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Transformer3DModel

    extra = ("model.train_mode=full", "eval.every=0", "eval.at_start=false", "eval.use_ema=false")
    trainer, initial = train_recipe_in_process(
        RECIPE, overrides(tiny_hunyuan_video15_i2v_dir, tmp_path, i2v_set, *extra)
    )
    assert_two_steps_at_parity_zero(tmp_path)
    assert len(changed_tensors(trainer, initial)) > len(initial) // 2  # the whole model moved
    exported = HunyuanVideo15Transformer3DModel.from_pretrained(tmp_path / "checkpoint-final" / "transformer")
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(tiny_hunyuan_video15_i2v_dir, transformer=exported)
    trained = trainer.policy.transformer.state_dict()
    assert pipe.transformer.state_dict().keys() == trained.keys()
    assert all(torch.equal(pipe.transformer.state_dict()[n], trained[n].to(exported.dtype)) for n in trained)
