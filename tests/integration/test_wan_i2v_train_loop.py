"""Wan image-to-video through the whole loop on tiny pipelines built from the published configs:
the shipped recipe shrunk by `tiny_video_overrides` (5 frames of 32x32: the Wan VAE encodes a
conditioning video in chunks of 4 frames after the first, so an image-to-video clip is 4k + 1
frames even over the tiny VAE; 3 steps, rule rewards),
first frames from the shipped image-to-video prompt set rebuilt at 32x32, two training steps
each with the rollout-vs-replay parity exactly 0.

- Wan 2.2 I2V-A14B, LoRA on both experts (every step trained, so both experts' steps are): each
  expert's adapter moves; the export is one folder per expert, which `WanImageToVideoPipeline`
  loads (`load_into_transformer_2` for the low-noise one) and renders differently with; the
  evaluation sheet starts each row with its first frame.
- Wan 2.1 I2V (its own recipe), a full fine-tune: `checkpoint-final/transformer/` loads into the
  pipeline holding the trained weights.
- Wan 2.2 TI2V-5B's image-to-video (its own recipe; the tiny saved as the WanPipeline its hub
  repository names), LoRA with the image's latent frame stepped and scored (model.given_frames'
  default, the reference's) and a full fine-tune with it excluded: the adapter and the transformer
  load into `WanImageToVideoPipeline` (expand_timesteps) and change its video.
- Wan 2.1 FLF2V (its own recipe), LoRA, each prompt with its first and last frame (the prompt
  set's `train_flf2v.jsonl`): the adapter loads into the pipeline and changes the video it renders
  between the two frames."""

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

RECIPE = "experiment/diffusion/wan_2_2/i2v_a14b_online_grpo_pickscore"
WAN21_RECIPE = "experiment/diffusion/wan_2_1/i2v_14b_online_grpo_pickscore"
TI2V_RECIPE = "experiment/diffusion/wan_2_2/ti2v_5b_i2v_online_grpo_pickscore"
FLF2V_RECIPE = "experiment/diffusion/wan_2_1/flf2v_14b_online_grpo_pickscore"
ALL_STEPS = ["rollout.sde_window.lo=0", "rollout.sde_window.hi=3", "rollout.sde_window.size=3"]
"""The recipe's window (step 1 of 8) at 3 steps would train one low-noise step: train all."""


def overrides(model_dir, out, i2v_set, *extra, manifests: str = "") -> list[str]:
    return tiny_video_overrides(
        model_dir,
        out,
        *i2v_manifests(i2v_set, manifests),
        "model.lora.target_modules=[to_q, to_k, to_v, to_out.0, ffn.net.0.proj, ffn.net.2]",
        "model.num_frames=5",
        *ALL_STEPS,
        *extra,
    )


def render(pipe, image: Image.Image, **last_image) -> torch.Tensor:
    return pipe(
        image=image,
        **last_image,
        prompt="the orange circle spins",
        num_inference_steps=3,
        height=32,
        width=32,
        num_frames=5,
        guidance_scale=1.0,
        max_sequence_length=16,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).frames


def test_lora_on_both_experts_trains_both_and_exports_one_loadable_adapter_each(
    tiny_wan_i2v_dirs, i2v_set, first_frame, tmp_path
):
    from diffusers import WanImageToVideoPipeline

    model_dir = tiny_wan_i2v_dirs["a14b"]
    trainer, initial = train_recipe_in_process(RECIPE, overrides(model_dir, tmp_path / "run", i2v_set))
    assert_two_steps_at_parity_zero(tmp_path / "run")
    moved = changed_tensors(trainer, initial)
    assert moved and all("lora_" in name for name in moved)
    assert {name.split(".")[0] for name in moved} == {"transformer", "transformer_2"}
    lora = tmp_path / "run" / "checkpoint-final" / "lora"
    assert "load_into_transformer_2=True" in (lora / "README.md").read_text()
    assert "image-to-video" in (lora / "README.md").read_text()
    pipe = WanImageToVideoPipeline.from_pretrained(model_dir)
    before = render(pipe, first_frame)
    pipe.load_lora_weights(lora / "transformer")
    pipe.load_lora_weights(lora / "transformer_2", load_into_transformer_2=True)
    assert not torch.allclose(before, render(pipe, first_frame))
    # the evaluation's frame strip: each row its first frame, then the video's 5 frames
    with Image.open(tmp_path / "run" / "eval_epoch_2" / "contact_sheet.png") as sheet:
        assert sheet.width == 6 * (sheet.width // 6) and sheet.width // 6 >= 32


def test_full_fine_tune_of_wan_2_1_i2v_trains_two_steps_and_its_transformer_loads(
    tiny_wan_i2v_dirs, i2v_set, first_frame, tmp_path
):
    from diffusers import WanImageToVideoPipeline, WanTransformer3DModel

    model_dir = tiny_wan_i2v_dirs["wan21"]
    trainer, initial = train_recipe_in_process(
        WAN21_RECIPE,
        overrides(
            model_dir,
            tmp_path / "run",
            i2v_set,
            "model.train_mode=full",
            "eval.every=0",
            "eval.at_start=false",
            "actor.ema.enabled=false",
            "eval.use_ema=false",
        ),
    )
    assert_two_steps_at_parity_zero(tmp_path / "run")
    moved = changed_tensors(trainer, initial)
    assert len(moved) > len(initial) // 2  # the whole model moved
    exported = WanTransformer3DModel.from_pretrained(tmp_path / "run" / "checkpoint-final" / "transformer")
    pipe = WanImageToVideoPipeline.from_pretrained(model_dir, transformer=exported)
    trained = trainer.policy.transformer.state_dict()
    assert all(
        torch.equal(tensor, trained[name].to(tensor.dtype)) for name, tensor in pipe.transformer.state_dict().items()
    )
    assert render(pipe, first_frame).shape == (1, 5, 3, 32, 32)


@pytest.mark.parametrize(("train_mode", "given_frames", "sampled_frames"), [("lora", None, 3), ("full", "excluded", 2)])
def test_ti2v_5b_image_to_video_trains_two_steps_and_its_export_loads_into_the_pipeline(
    tiny_wan22_dirs, i2v_set, first_frame, tmp_path, train_mode, given_frames, sampled_frames
):
    """`given_frames` None: the recipe's model.given_frames (the default, stepped)."""
    from diffusers import WanImageToVideoPipeline, WanTransformer3DModel

    model_dir = tiny_wan22_dirs["ti2v"]  # model_index.json: WanPipeline, as the hub repository's
    extra = ["eval.every=0", "eval.at_start=false", "actor.ema.enabled=false", "eval.use_ema=false"]
    if given_frames is not None:
        extra.append(f"model.given_frames={given_frames}")
    trainer, initial = train_recipe_in_process(
        TI2V_RECIPE, overrides(model_dir, tmp_path / "run", i2v_set, f"model.train_mode={train_mode}", *extra)
    )
    assert_two_steps_at_parity_zero(tmp_path / "run")
    assert trainer.policy.latent_shape(32, 32)[1] == sampled_frames  # 3 latent frames, the image's first
    moved = changed_tensors(trainer, initial)
    pipe = WanImageToVideoPipeline.from_pretrained(model_dir)
    assert pipe.config.expand_timesteps
    before = render(pipe, first_frame)
    final = tmp_path / "run" / "checkpoint-final"
    if train_mode == "lora":
        assert moved and all("lora_" in name for name in moved)
        pipe.load_lora_weights(final / "lora")
    else:
        assert len(moved) > len(initial) // 2  # the whole model moved
        pipe.transformer = WanTransformer3DModel.from_pretrained(final / "transformer")
    after = render(pipe, first_frame)
    assert after.shape == before.shape == (1, 5, 3, 32, 32) and not torch.allclose(before, after)


def test_flf2v_lora_trains_two_steps_on_first_and_last_frames_and_its_adapter_loads(
    tiny_wan_i2v_dirs, i2v_set, first_frame, tmp_path
):
    from diffusers import WanImageToVideoPipeline

    model_dir = tiny_wan_i2v_dirs["flf2v"]
    extra = ["eval.every=0", "eval.at_start=false", "actor.ema.enabled=false", "eval.use_ema=false"]
    trainer, initial = train_recipe_in_process(
        FLF2V_RECIPE, overrides(model_dir, tmp_path / "run", i2v_set, *extra, manifests="_flf2v")
    )
    assert_two_steps_at_parity_zero(tmp_path / "run")
    moved = changed_tensors(trainer, initial)
    assert moved and all("lora_" in name for name in moved)
    with Image.open(i2v_set / "images" / "test_00_last.png") as image:
        last = {"last_image": image.convert("RGB")}
    pipe = WanImageToVideoPipeline.from_pretrained(model_dir)
    before = render(pipe, first_frame, **last)
    pipe.load_lora_weights(tmp_path / "run" / "checkpoint-final" / "lora")
    after = render(pipe, first_frame, **last)
    assert after.shape == before.shape == (1, 5, 3, 32, 32) and not torch.allclose(before, after)
