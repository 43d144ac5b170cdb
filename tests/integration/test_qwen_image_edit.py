"""Qwen-Image-Edit and Qwen-Image-Edit-Plus (2509, 2511) on tiny random pipelines built from the
published configs and loaded from disk: our sampler with the SDE off reproduces
QwenImageEditPipeline / QwenImageEditPlusPipeline for the same source pictures (with and without
true CFG; two pictures a prompt for Plus; 2511's zero_cond_t; with model.source_resolution=pipeline
the unmodified pipelines, sources resized to about 1024²), Qwen2.5-VL reads the source, the
exported LoRA loads into the pipeline, and the shipped editing recipe (shrunk) trains the LoRA and
the whole transformer with source images from a manifest, replay parity 0."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image
from support import (
    SOURCE_SCORER,
    TINY_DEPTH,
    TINY_REDUCTION,
    assert_close_reordered,
    read_rows,
    tiny_overrides,
    train_one_lora_step_at_parity_zero,
    train_recipe_in_process,
)

from genalign.models.diffusers_common import pack_2x2, unpack_2x2
from genalign.models.qwen_image_edit import QwenImageEditPolicy
from genalign.models.qwen_image_edit_plus import QwenImageEditPlusPolicy
from genalign.models.spec import family_spec
from genalign.preflight.load import load_config
from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask

RECIPE = "experiment/diffusion/qwen_image_edit_plus/online_grpo_edit"
EDIT_RECIPE = "experiment/diffusion/qwen_image_edit/online_grpo_edit"
PROMPTS = ["make the red circle blue", "turn the square into a cross"]
MAX_TOKENS = 512


@pytest.fixture(scope="module")
def tiny_2511_dir(tmp_path_factory):
    """The tiny Qwen-Image-Edit-2511 (`SPEC.tiny_variants`: its transformer sets zero_cond_t)."""
    path = tmp_path_factory.mktemp("tiny_2511") / "pipeline"
    family_spec("qwen_image_edit_plus").build_tiny(0, "Qwen/Qwen-Image-Edit-2511").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tiny_qwen_image_edit_dir, tiny_qwen_image_edit_plus_dir, tiny_2511_dir):
    """name -> (policy, the diffusers pipeline loaded separately from the same directory, directory)."""
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline

    found = {}
    for name, policy_cls, pipeline_cls, directory in [
        ("edit", QwenImageEditPolicy, QwenImageEditPipeline, tiny_qwen_image_edit_dir),
        ("2509", QwenImageEditPlusPolicy, QwenImageEditPlusPipeline, tiny_qwen_image_edit_plus_dir),
        ("2511", QwenImageEditPlusPolicy, QwenImageEditPlusPipeline, tiny_2511_dir),
    ]:
        policy = policy_cls.from_pretrained(directory, max_sequence_length=MAX_TOKENS)
        found[name] = (policy, pipeline_cls.from_pretrained(directory), directory)
    return found


def sources(count: int = 1, side: int = 64) -> torch.Tensor:
    """Random uint8 source pictures [2, count, 3, side, side]."""
    pixels = np.random.default_rng(count).integers(0, 256, (2, count, 3, side, side), dtype=np.uint8)
    return torch.from_numpy(pixels)


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


def at_own_size(monkeypatch, pipe, side: int) -> None:
    """The pipeline with its source resized to the source's own size (the policy's documented
    difference, Flow-GRPO's): QwenImageEditPlusPipeline's VAE area, QwenImageEditPipeline's
    `calculate_dimensions` (its one sizing of the source, for the VAE and Qwen2.5-VL alike)."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit, pipeline_qwenimage_edit_plus

    if type(pipe).__name__ == "QwenImageEditPlusPipeline":
        monkeypatch.setattr(pipeline_qwenimage_edit_plus, "VAE_IMAGE_SIZE", side * side)
    else:
        monkeypatch.setattr(pipeline_qwenimage_edit, "calculate_dimensions", lambda area, ratio: (side, side, None))


@pytest.mark.parametrize(
    ("name", "count", "cfg_scale"),
    [("edit", 1, 1.0), ("edit", 1, 4.0), ("2509", 2, 1.0), ("2509", 1, 4.0), ("2511", 2, 4.0)],
)
def test_ode_sampling_with_sources_reproduces_the_pipeline(models, monkeypatch, name, count, cfg_scale):
    """A 64x64 result from `count` 64x64 sources: our encoding (prompt and pictures together),
    velocity and ODE kernel from the same noise = the pipeline's latents and images, prompt by
    prompt (QwenImageEditPlusPipeline takes one prompt a call)."""
    policy, pipe, _ = models[name]
    at_own_size(monkeypatch, pipe, 64)
    picture = sources(count)
    cond = policy.encode_conditions(PROMPTS, picture, with_negative=cfg_scale > 1)
    start = initial_noise([11, 12], [11, 12], policy.latent_shape(64, 64))[0]  # [2, C, 8, 8]
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))
    with torch.no_grad():
        ours = sample_trajectory(policy, cond, start, None, sigmas, cfg_scale, 0.0, sde_step_mask(3, 0.0)).latents[
            :, -1
        ]
    for index, prompt in enumerate(PROMPTS):
        images = [pil(image) for image in picture[index]]
        extra = dict(true_cfg_scale=cfg_scale, negative_prompt=" ") if cfg_scale > 1 else {}
        common = dict(
            image=images if name != "edit" else images[0],
            prompt=prompt,
            height=64,
            width=64,
            num_inference_steps=3,
            latents=pack_2x2(start[index : index + 1]),
            **extra,
        )
        theirs = unpack_2x2(pipe(output_type="latent", **common).images, 8, 8)  # [1, C, 8, 8]
        # the same math in its own order over 3 steps (the sources' tokens join every attention;
        # our batch pads the prompts with masked tokens), CFG gain |1 − w| + |w|
        assert_close_reordered(
            ours[index : index + 1],
            theirs,
            length=(1 + count) * TINY_REDUCTION,
            depth=3 * TINY_DEPTH,
            gain=abs(1 - cfg_scale) + cfg_scale,
        )
        rendered = pipe(output_type="pt", **common).images  # [1, 3, 64, 64] in [0, 1]
        assert (policy.decode(ours[index : index + 1]).float() - rendered * 255).abs().max() <= 1.0
    assert (ours - start).abs().max() > 0.1  # the sample moved


@pytest.mark.parametrize(
    ("name", "count", "cfg_scale"),
    # each 1024² source is a VAE encode over 128x128 latent pixels: one form in the default suite
    [
        pytest.param("edit", 1, 4.0, marks=pytest.mark.slow),
        ("2509", 1, 1.0),
        pytest.param("2509", 2, 4.0, marks=pytest.mark.slow),
    ],
)
def test_pipeline_source_resolution_reproduces_the_unmodified_pipeline(models, name, count, cfg_scale):
    """model.source_resolution=pipeline: a 64x64 source is resized as the pipeline resizes it
    (1024x1024 at its 1:1 ratio), and our sampler reproduces the pipeline called as users call it,
    no size patched (Qwen-Image-Edit's Qwen2.5-VL also reads the 1024² picture: about 1.4k tokens,
    so a larger text budget). One prompt: every 1024² source costs a VAE encode and 4096 tokens."""
    policy_cls = QwenImageEditPolicy if name == "edit" else QwenImageEditPlusPolicy
    _, pipe, directory = models[name]
    policy = policy_cls.from_pretrained(directory, max_sequence_length=2048, source_resolution="pipeline")
    picture = sources(count)[:1]  # [1, count, 3, 64, 64]
    cond = policy.encode_conditions(PROMPTS[:1], picture, with_negative=cfg_scale > 1)
    assert cond.source_latents.shape[-2:] == (128, 128)  # 1024² pixels / 8
    start = initial_noise([11], [11], policy.latent_shape(64, 64))[0]  # [1, C, 8, 8]
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))
    with torch.no_grad():
        ours = sample_trajectory(policy, cond, start, None, sigmas, cfg_scale, 0.0, sde_step_mask(3, 0.0)).latents[
            :, -1
        ]
    images = [pil(image) for image in picture[0]]
    extra = dict(true_cfg_scale=cfg_scale, negative_prompt=" ") if cfg_scale > 1 else {}
    theirs = pipe(
        image=images if name != "edit" else images[0],
        prompt=PROMPTS[0],
        height=64,
        width=64,
        num_inference_steps=3,
        latents=pack_2x2(start),
        output_type="latent",
        **extra,
    ).images
    # the longest reduction is now the VAE's attention over the source's 128x128 latent pixels
    assert_close_reordered(
        ours, unpack_2x2(theirs, 8, 8), length=128 * 128, depth=3 * TINY_DEPTH + 1, gain=abs(1 - cfg_scale) + cfg_scale
    )
    assert (ours - start).abs().max() > 0.1  # the sample moved


def test_qwen_vl_and_the_transformer_both_read_the_source(models):
    """encode_sources = the pipeline's `_encode_vae_image` of its preprocessed source; another
    picture changes the prompt's embeddings (Qwen2.5-VL sees it) and the velocity."""
    policy, pipe, _ = models["2509"]
    picture = sources()
    pixels = pipe.image_processor.preprocess([pil(image) for image in picture[:, 0]], 64, 64)  # [2, 3, 64, 64]
    expected = pipe._encode_vae_image(pixels[:, :, None], generator=None)[:, :, 0]  # [2, C, 8, 8]
    ours = policy.encode_sources(picture)  # [2, 1, C, 8, 8]
    torch.testing.assert_close(ours[:, 0], expected, atol=1e-5, rtol=0)  # [0,1]→[-1,1] and 1/std rounding only
    cond = policy.encode_conditions(PROMPTS, picture, with_negative=False)
    other = policy.encode_conditions(PROMPTS, picture.flip(0), with_negative=False)
    assert cond.embeds.shape == other.embeds.shape and (cond.embeds - other.embeds).abs().max() > 1e-3
    latents, sigma = initial_noise([1, 2], [1, 2], policy.latent_shape(64, 64))[0], torch.tensor([0.7, 0.4])
    with torch.no_grad():
        edited = policy.velocity(latents, sigma, cond, 1.0)
        moved = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=ours.flip(0)), 1.0)
    assert edited.shape == latents.shape and (edited - moved).abs().max() > 1e-3


def test_a_prompt_without_a_source_is_refused_naming_the_manifest(models):
    policy, _, _ = models["edit"]
    with pytest.raises(ValueError, match="data.manifest"):
        policy.encode_prompts(PROMPTS, with_negative=False)


def test_a_prompt_longer_than_the_budget_is_refused_naming_the_key(models, monkeypatch):
    policy, _, _ = models["2509"]
    monkeypatch.setattr(policy, "max_sequence_length", 16)
    with pytest.raises(ValueError, match="model.max_sequence_length=16"):
        policy.encode_conditions(PROMPTS, sources(), with_negative=False)


@pytest.mark.parametrize("name", ["edit", "2511"])
def test_exported_lora_loads_into_the_pipeline_with_the_same_velocity(models, tmp_path, name):
    from support import assert_lora_export_reproduces

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    policy_cls = QwenImageEditPolicy if name == "edit" else QwenImageEditPlusPolicy
    _, pipe_loaded, directory = models[name]
    fresh = policy_cls.from_pretrained(directory, max_sequence_length=MAX_TOKENS)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)  # the recipe's 12 targets
    with torch.no_grad():
        for param_name, param in fresh.transformer.named_parameters():
            if "lora_B" in param_name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(param_name)))
    pipe = type(pipe_loaded).from_pretrained(directory)
    loaded = policy_cls(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS)
    cond = fresh.encode_conditions(PROMPTS, sources(), with_negative=True)
    latents = initial_noise([1, 2], [1, 2], fresh.latent_shape(64, 64))[0]
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (latents, torch.tensor([0.7, 0.3]), cond, 4.0)
    )


def test_recipe_composes_with_flow_grpos_qwen_image_edit_plus_settings():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path) == ("qwen_image_edit_plus", "Qwen/Qwen-Image-Edit-2509")
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level) == (10, 4.0, 0.9)
    assert (cfg.rollout.sde_window.size, cfg.rollout.sde_window.lo) == (4, 0)
    assert (cfg.rollout.height, cfg.rollout.n, cfg.rollout.rollout_batch_size, cfg.rollout.sample_batch_size) == (
        512,
        4,
        32,
        4,
    )
    assert cfg.algorithm.kl_beta == 0.0 and cfg.eval.num_steps == 50 and not cfg.actor.ema.enabled
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, len(cfg.model.lora.target_modules)) == (64, 128.0, 12)
    assert cfg.model.gradient_checkpointing and cfg.distributed.training.strategy == "fsdp2"
    # two optimizer steps a step: 32 x 4 samples / 4 a micro-batch / 16
    assert 32 * 4 // cfg.rollout.sample_batch_size // cfg.actor.gradient_accumulation_steps == 2
    assert dict(cfg.reward.components) == {"image_similarity": 0.2, "vlm_judge": 0.8}
    assert load_config(RECIPE, ["/model/diffusion/qwen_image_edit_plus=2511"]).model.path == "Qwen/Qwen-Image-Edit-2511"


def overrides(model_dir, output_dir, edit_set, *extra):
    return tiny_overrides(
        model_dir,
        output_dir,
        f"data.manifest={edit_set / 'train.jsonl'}",
        f"data.eval_manifest={edit_set / 'test.jsonl'}",
        "model.lora.target_modules=[attn.to_q, attn.to_k, attn.to_v, img_mlp.net.2]",
        "rollout.num_steps=2",
        "rollout.guidance_scale=2.0",
        "actor.gradient_accumulation_steps=1",
        f"reward.components={{{SOURCE_SCORER}: 1.0, image_similarity: 0.0, vlm_judge: 0.0}}",
        f"reward.allow_import=[{SOURCE_SCORER}]",
        "trainer.num_steps=2",
        "eval.at_start=false",
        *extra,
    )


@pytest.mark.parametrize("mode", ["lora", "full"])
@pytest.mark.parametrize(
    ("recipe", "model_dir", "pipeline_class", "window"),
    [
        (EDIT_RECIPE, "tiny_qwen_image_edit_dir", "QwenImageEditPipeline", 0),
        (RECIPE, "tiny_qwen_image_edit_plus_dir", "QwenImageEditPlusPipeline", 1),  # its window of 4, shrunk
    ],
)
def test_editing_recipe_trains_two_steps_with_replay_parity(
    request, edit_set, tmp_path, recipe, model_dir, pipeline_class, window, mode
):
    """A shipped editing recipe (shrunk), LoRA or the whole transformer, 2 steps: replay with the
    sources equals the rollout (parity 0), the trained weights moved, the LoRA is exported (and
    its run evaluates the held-out edits, source -> result sheet), and a full fine-tune's
    transformer loads into the pipeline users load."""
    import diffusers

    directory = request.getfixturevalue(model_dir)
    evaluation = "eval.every=2" if mode == "lora" else "eval.every=0"  # the LoRA run also evaluates its edits
    shrunk = overrides(
        directory, tmp_path, edit_set, f"model.train_mode={mode}", f"rollout.sde_window.size={window}", evaluation
    )
    trainer, initial = train_recipe_in_process(recipe, shrunk)
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # replay with the sources = rollout
    final = trainer.policy.transformer.state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], final[k])}
    if mode == "lora":
        assert changed and all("lora" in k for k in changed)
        assert (tmp_path / "checkpoint-final/lora/pytorch_lora_weights.safetensors").exists()
        with Image.open(tmp_path / "eval_epoch_2" / "contact_sheet.png") as sheet:  # source | result rows
            assert sheet.size[0] == 2 * 128
        return
    assert len(changed) > len(initial) // 2  # the whole model moved
    transformer = diffusers.QwenImageTransformer2DModel.from_pretrained(tmp_path / "checkpoint-final" / "transformer")
    pipe = getattr(diffusers, pipeline_class).from_pretrained(directory, transformer=transformer)
    for name, tensor in pipe.transformer.state_dict().items():
        assert torch.equal(tensor, final[name].to(tensor.dtype)), name


@pytest.mark.slow  # about 3 minutes on a busy 2-core box; replay reads Condition.source_latents as "run" does
def test_pipeline_source_resolution_trains_with_replay_parity(tiny_qwen_image_edit_dir, edit_set, tmp_path):
    """The editing recipe (shrunk, LoRA; one step without CFG, as every 1024² source costs) with
    model.source_resolution=pipeline: the rollout and replay read the same resized sources'
    latents, replay parity exactly 0, the adapter moved."""
    shrunk = overrides(
        tiny_qwen_image_edit_dir,
        tmp_path,
        edit_set,
        "model.source_resolution=pipeline",
        "model.max_sequence_length=2048",
        "rollout.sde_window.size=0",
        "rollout.guidance_scale=1.0",
        "trainer.num_steps=1",
        "eval.every=0",
    )
    trainer = train_one_lora_step_at_parity_zero(EDIT_RECIPE, shrunk, tmp_path)
    assert trainer.policy.source_resolution == "pipeline"  # replay read the resized sources' latents
