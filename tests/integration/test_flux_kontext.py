"""FLUX.1 Kontext, the image-conditioned family, on its tiny random pipeline loaded from disk:
our sampler with the SDE off reproduces FluxKontextPipeline for the same source image (with and
without true CFG; with model.source_resolution=pipeline the unmodified pipeline, the source
resized to its preferred Kontext resolution), the source matters, the exported LoRA loads into
FluxKontextPipeline, and the shipped editing recipe (shrunk) runs the whole loop with source
images from a manifest: encoded once a step, replay parity 0 (also with the pipeline's source
size), a reward that reads the source, source -> result sheets, LoRA and full fine-tune
trained, bitwise resume."""

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
    assert_lora_export_reproduces,
    assert_resumed_bitwise,
    ode_sample,
    perturb_lora_b,
    read_rows,
    tiny_overrides,
    train_one_lora_step_at_parity_zero,
    train_recipe_in_process,
)

from genalign.data.sampler import PromptGroupBatch
from genalign.data.source_images import SOURCE_KEY
from genalign.models.diffusers_common import pack_2x2, unpack_2x2
from genalign.models.flux_kontext import FluxKontextPolicy
from genalign.models.flux_kontext.policy import MULTIPLE_OF, pipeline_source_size
from genalign.preflight.load import load_config
from genalign.rewards.base import source_images
from genalign.rollout.chunks import encode_distinct
from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask
from genalign.training.parity import replay_parity
from genalign.training.trainer import Trainer

RECIPE = "experiment/diffusion/flux_kontext/online_grpo_edit"
MAX_TOKENS = 24
GUIDANCE = 2.5
"""FLUX.1 Kontext-dev's embedded guidance in Flow-GRPO's recipe (the pipeline's guidance_scale)."""
PROMPTS = ["make the red circle blue", "turn the square into a cross"]


@pytest.fixture(scope="module")
def kontext(tiny_flux_kontext_dir):
    """(policy, FluxKontextPipeline loaded separately from the same directory, directory)."""
    from diffusers import FluxKontextPipeline

    policy = FluxKontextPolicy.from_pretrained(
        tiny_flux_kontext_dir, max_sequence_length=MAX_TOKENS, embedded_guidance=GUIDANCE
    )
    return policy, FluxKontextPipeline.from_pretrained(tiny_flux_kontext_dir), tiny_flux_kontext_dir


def sources(height: int = 64, width: int = 64) -> torch.Tensor:
    """Two random uint8 source images [2, 1, 3, H, W]."""
    pixels = np.random.default_rng(0).integers(0, 256, (2, 1, 3, height, width), dtype=np.uint8)
    return torch.from_numpy(pixels)


def pil(images: torch.Tensor) -> list[Image.Image]:
    return [Image.fromarray(image.permute(1, 2, 0).numpy()) for image in images]


@pytest.mark.parametrize("cfg_scale", [1.0, 4.0])
def test_ode_sampling_with_a_source_reproduces_the_pipeline(kontext, cfg_scale):
    """A 64x96 result from a 64x64 source (Kontext packs each at its own size): our velocity +
    the ODE kernel from the same noise = FluxKontextPipeline's latents and images."""
    policy, pipe, _ = kontext
    source = sources()
    cond = dataclasses.replace(
        policy.encode_prompts(PROMPTS, with_negative=cfg_scale > 1), source_latents=policy.encode_sources(source)
    )
    start, ours = ode_sample(policy, cond, 64, 96, cfg_scale)
    extra = dict(true_cfg_scale=cfg_scale, negative_prompt=[""] * 2) if cfg_scale > 1 else {}
    common = dict(
        image=pil(source[:, 0]),
        prompt=PROMPTS,
        height=64,
        width=96,
        num_inference_steps=3,
        latents=pack_2x2(start),
        guidance_scale=GUIDANCE,
        max_sequence_length=MAX_TOKENS,
        max_area=64 * 96,  # the requested size as is (Flow-GRPO passes resolution²)
        _auto_resize=False,  # the source at its own size, not snapped to Kontext's preferred ones
        **extra,
    )
    packed = pipe(output_type="latent", **common).images  # [2, N, 4C]
    theirs = unpack_2x2(packed, 8, 12)
    # the pipeline's loop vs ours: the same math in its own order, 3 steps, CFG gain |1 − w| + |w|
    # (the source tokens join every attention: twice the sequence of the text-to-image check)
    assert_close_reordered(
        ours, theirs, length=2 * TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=abs(1 - cfg_scale) + cfg_scale
    )
    assert (ours - start).abs().max() > 0.1  # the sample moved
    images = pipe(output_type="pt", **common).images  # [2, 3, 64, 96] in [0, 1]
    decoded = policy.decode(ours)
    assert decoded.shape == (2, 3, 64, 96) and (decoded.float() - images * 255).abs().max() <= 1.0


def sample_one_group(policy, source_path: str):
    """One prompt group of two samples editing `source_path` (2 SDE steps, noise 0.7), sampled
    by the collector as a rollout step does."""
    from genalign.rollout.collector import SamplingSpec, generate

    groups = PromptGroupBatch(
        prompts=["make it blue"] * 2,
        prompt_ids=torch.tensor([0, 0]),
        group_ids=torch.tensor([0, 0]),
        seeds=torch.tensor([5, 6]),
        metadata=[{SOURCE_KEY: [source_path]}, {SOURCE_KEY: [source_path]}],
    )
    spec = SamplingSpec(height=64, width=64, num_steps=2, guidance_scale=1.0, noise_level=0.7, chunk_size=2)
    return generate(policy, groups, spec)


@pytest.fixture(scope="module")
def pipeline_sized(kontext):
    """A policy with model.source_resolution=pipeline over the same tiny weights."""
    _, _, directory = kontext
    return FluxKontextPolicy.from_pretrained(
        directory, max_sequence_length=MAX_TOKENS, embedded_guidance=GUIDANCE, source_resolution="pipeline"
    )


class _Stop(Exception):
    """Raised by a spy to end a pipeline call once it has shown what it computed."""


@pytest.mark.parametrize(
    ("height", "width", "expected"),
    [
        (64, 64, (1024, 1024)),  # 1:1
        (64, 96, (832, 1248)),  # 1.5, a preferred ratio
        (96, 64, (1248, 832)),
        (48, 112, (672, 1568)),  # 2.33, the widest
        (80, 64, (1104, 944)),  # 0.8: 944/1104 = 0.855 is nearer than 880/1184 = 0.743
        (79, 64, (1024, 1024)),  # floored to 64 x 64 first (get_default_height_width): 1:1, not 0.81
    ],
)
def test_pipeline_source_size_is_the_size_the_pipeline_resizes_a_source_to(
    kontext, monkeypatch, height, width, expected
):
    """`pipeline_source_size` = the size of the picture FluxKontextPipeline's own `__call__` hands
    its VAE (`_auto_resize` on, as users call it), seen by a spy on `prepare_latents`; the figures
    are the preferred Kontext resolution nearest each ratio, worked by hand."""
    _, pipe, _ = kontext
    assert pipe.vae_scale_factor * 2 == MULTIPLE_OF  # the pipeline's multiple_of
    seen = {}

    def spy(image, *args, **kwargs):
        seen["size"] = tuple(image.shape[-2:])  # [1, 3, H', W'] in [-1, 1]
        raise _Stop

    monkeypatch.setattr(pipe, "prepare_latents", spy)
    with pytest.raises(_Stop):
        pipe(image=Image.new("RGB", (width, height)), prompt="x", height=64, width=64, max_sequence_length=MAX_TOKENS)
    assert seen["size"] == pipeline_source_size(height, width) == expected


def test_pipeline_source_resolution_reproduces_the_unmodified_pipeline(kontext, pipeline_sized):
    """model.source_resolution=pipeline: a 64x64 source is encoded at 1024x1024 (the preferred
    Kontext resolution at its 1:1 ratio) and our sampler with the SDE off reproduces the pipeline
    called as users call it, `_auto_resize` on, nothing patched. The result's size is the run's:
    the pipeline's `height`, `width` and `max_area=height·width` (its public argument; left at its
    1024² default the pipeline would rescale a 64x64 request to 1024x1024). One prompt: the 1024²
    source is 4096 tokens in every forward."""
    _, pipe, _ = kontext
    source = sources()[:1]  # [1, 1, 3, 64, 64]
    cond = pipeline_sized.encode_conditions(PROMPTS[:1], source, with_negative=False)
    assert cond.source_latents.shape[-2:] == (128, 128)  # 1024² pixels / 8
    start = initial_noise([11], [11], pipeline_sized.latent_shape(64, 64))[0]  # [1, C, 8, 8]
    sigmas = pipeline_sized.sigmas(3, tuple(start.shape[1:]))
    with torch.no_grad():
        trajectory = sample_trajectory(pipeline_sized, cond, start, None, sigmas, 1.0, 0.0, sde_step_mask(3, 0.0))
    ours = trajectory.latents[:, -1]
    packed = pipe(
        image=pil(source[:, 0])[0],
        prompt=PROMPTS[0],
        height=64,
        width=64,
        max_area=64 * 64,
        num_inference_steps=3,
        latents=pack_2x2(start),
        guidance_scale=GUIDANCE,
        max_sequence_length=MAX_TOKENS,
        output_type="latent",
    ).images  # [1, 16, 4C]
    theirs = unpack_2x2(packed, 8, 8)
    # 3 steps of the same math in the pipeline's order; every attention reads the text, the
    # target's 16 tokens and the source's 4096
    assert_close_reordered(ours, theirs, length=MAX_TOKENS + 16 + 64 * 64, depth=3 * TINY_DEPTH)
    assert (ours - start).abs().max() > 0.1  # the sample moved


def test_pipeline_source_resolution_replays_the_rollout_exactly(pipeline_sized, edit_set):
    """With model.source_resolution=pipeline the trajectories carry the resized source's latents
    and replay reads them: every step's replayed log-prob equals the rollout's (gap exactly 0)."""
    batch = sample_one_group(pipeline_sized, str(edit_set / "images/train_00.png"))
    assert batch.condition.table.source_latents.shape[-2:] == (128, 128)
    gaps = replay_parity(pipeline_sized, batch, [0, 1], chunk_size=2)
    assert gaps == {0: 0.0, 1: 0.0}


def test_the_source_is_the_pipelines_encoding_and_changes_the_velocity(kontext):
    """encode_sources = the pipeline's `_encode_vae_image` of its preprocessed source (the
    posterior's mode, shifted and scaled); a different source, or none, changes the velocity."""
    policy, pipe, _ = kontext
    source = sources()
    pixels = pipe.image_processor.preprocess(pil(source[:, 0]), 64, 64)  # [2, 3, 64, 64] in [-1, 1]
    expected = pipe._encode_vae_image(pixels, generator=None)  # [2, C, 8, 8]
    ours = policy.encode_sources(source)  # [2, 1, C, 8, 8]
    assert ours.shape == (2, 1, *expected.shape[1:])
    torch.testing.assert_close(ours[:, 0], expected, atol=1e-5, rtol=0)  # [0,1]→[-1,1] rounding only
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    latents, sigma = initial_noise([1, 2], [1, 2], policy.latent_shape(64, 64))[0], torch.tensor([0.7, 0.4])
    with torch.no_grad():
        plain = policy.velocity(latents, sigma, cond, 1.0)
        edited = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=ours), 1.0)
        other = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=ours.flip(0)), 1.0)
    assert edited.shape == plain.shape == latents.shape
    assert (edited - plain).abs().max() > 1e-3 and (edited - other).abs().max() > 1e-3


def test_exported_lora_loads_into_flux_kontext_pipeline_with_the_same_velocity(kontext, tmp_path):
    from diffusers import FluxKontextPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    _, _, directory = kontext
    fresh = FluxKontextPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS, embedded_guidance=GUIDANCE)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, [*fresh.lora_target_modules, "proj_mlp"])  # the recipe's 13 targets
    perturb_lora_b(fresh.transformer)
    pipe = FluxKontextPipeline.from_pretrained(directory)
    loaded = FluxKontextPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, embedded_guidance=GUIDANCE)
    cond = dataclasses.replace(
        fresh.encode_prompts(PROMPTS, with_negative=False), source_latents=fresh.encode_sources(sources())
    )
    latents = initial_noise([1, 2], [1, 2], fresh.latent_shape(64, 64))[0]
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (latents, torch.tensor([0.7, 0.3]), cond, 1.0)
    )


def test_a_step_encodes_each_distinct_prompt_and_source_once(kontext, edit_set):
    """The same instruction on two different pictures is two conditions; a group's repeats are
    one. Rows are (text, source), not the text alone."""
    policy, _, _ = kontext
    folder = edit_set
    a, b = str(folder / "images/train_00.png"), str(folder / "images/train_01.png")
    metadata = [{SOURCE_KEY: [a]}, {SOURCE_KEY: [a]}, {SOURCE_KEY: [b]}, {SOURCE_KEY: [b]}]
    prompts = ["make it blue"] * 4
    encoded, rows = encode_distinct(policy, prompts, False, metadata)
    assert rows.tolist() == [0, 0, 1, 1] and encoded.source_latents.shape[:2] == (2, 1)
    assert not torch.equal(encoded.source_latents[0], encoded.source_latents[1])
    text_only, text_rows = encode_distinct(policy, prompts, False)
    assert text_rows.tolist() == [0, 0, 0, 0] and text_only.source_latents is None


def overrides(model_dir, output_dir, edit_set, *extra):
    return tiny_overrides(
        model_dir,
        output_dir,
        f"data.manifest={edit_set / 'train.jsonl'}",
        f"data.eval_manifest={edit_set / 'test.jsonl'}",
        "model.max_sequence_length=16",
        "model.lora.target_modules=[attn.to_q, attn.to_k, attn.to_v, proj_mlp]",
        "rollout.num_steps=2",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        f"reward.components={{{SOURCE_SCORER}: 1.0, image_similarity: 0.0, vlm_judge: 0.0}}",
        f"reward.allow_import=[{SOURCE_SCORER}]",
        *extra,
    )


@pytest.fixture(scope="module")
def finished_run(tiny_flux_kontext_dir, edit_set, tmp_path_factory):
    out = tmp_path_factory.mktemp("run_kontext")
    trainer, initial = train_recipe_in_process(RECIPE, overrides(tiny_flux_kontext_dir, out, edit_set))
    return out, trainer, initial


def test_recipe_composes_with_flow_grpos_kontext_settings():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path) == ("flux_kontext", "black-forest-labs/FLUX.1-Kontext-dev")
    assert (cfg.model.embedded_guidance, cfg.model.max_sequence_length) == (2.5, 128)
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level) == (6, 1.0, 0.9)
    assert (cfg.rollout.height, cfg.rollout.width, cfg.rollout.n, cfg.rollout.rollout_batch_size) == (512, 512, 21, 48)
    assert cfg.algorithm.kl_beta == 0.0 and cfg.eval.num_steps == 28 and cfg.actor.ema.enabled
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, len(cfg.model.lora.target_modules)) == (64, 128.0, 13)
    # two optimizer steps a step: 48 x 21 samples / 3 a micro-batch / 168
    assert 48 * 21 // cfg.rollout.sample_batch_size // cfg.actor.gradient_accumulation_steps == 2
    assert dict(cfg.reward.components) == {"image_similarity": 0.5, "vlm_judge": 0.5}
    assert cfg.data.manifest == "datasets/edit/train.jsonl"


def test_editing_run_trains_the_lora_with_replay_parity_and_source_sheets(finished_run):
    out, trainer, initial = finished_run
    for name in ["metrics.csv", "eval_metrics.csv", "checkpoint-final/lora/pytorch_lora_weights.safetensors"]:
        assert (out / name).exists(), name
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # replay with the source = rollout
    final = trainer.policy.transformer.state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], final[k])}
    assert changed and all("lora" in k for k in changed)
    with Image.open(out / "eval_epoch_3" / "contact_sheet.png") as sheet:
        width, height = sheet.size
    # an editing sheet: one row per sample (2 prompts), each row source | result, tiles of 128
    assert (width, height) == (2 * 128, 2 * (height // 2)) and height // 2 > 128


@pytest.mark.slow  # a 1024² source in every forward of a whole run; the fast check is the replay test above
def test_pipeline_source_resolution_trains_with_replay_parity(tiny_flux_kontext_dir, edit_set, tmp_path):
    """The editing recipe (shrunk, LoRA, one step) with model.source_resolution=pipeline: rollout
    and replay read the same resized sources' latents, replay parity exactly 0, the adapter moved."""
    shrunk = overrides(
        tiny_flux_kontext_dir,
        tmp_path,
        edit_set,
        "model.source_resolution=pipeline",
        "trainer.num_steps=1",
        "eval.every=0",
        "eval.at_start=false",
    )
    assert train_one_lora_step_at_parity_zero(RECIPE, shrunk, tmp_path).policy.source_resolution == "pipeline"


def test_resume_continues_bitwise(finished_run, tiny_flux_kontext_dir, edit_set, tmp_path):
    out, _, _ = finished_run
    cfg = load_config(
        RECIPE,
        overrides(tiny_flux_kontext_dir, tmp_path / "resumed", edit_set, f"trainer.resume_from={out / 'checkpoint-2'}"),
    )
    Trainer(cfg).train()
    assert_resumed_bitwise(out, tmp_path / "resumed", step=3)


def test_exported_lora_changes_what_flux_kontext_pipeline_renders(finished_run, tiny_flux_kontext_dir, edit_set):
    from diffusers import FluxKontextPipeline

    out, _, _ = finished_run
    pipe = FluxKontextPipeline.from_pretrained(tiny_flux_kontext_dir)
    with Image.open(edit_set / "images/test_00.png") as image:
        source = image.convert("RGB")

    def render():
        return pipe(
            image=source,
            prompt="make the orange circle purple",
            num_inference_steps=2,
            height=64,
            width=64,
            max_area=64 * 64,
            _auto_resize=False,
            guidance_scale=GUIDANCE,
            max_sequence_length=16,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images

    before = render()
    pipe.load_lora_weights(out / "checkpoint-final" / "lora")
    assert not torch.allclose(before, render())


def test_full_fine_tune_trains_two_steps_and_its_transformer_loads_into_the_pipeline(
    tiny_flux_kontext_dir, edit_set, tmp_path
):
    from diffusers import FluxKontextPipeline, FluxTransformer2DModel

    trainer, initial = train_recipe_in_process(
        RECIPE,
        overrides(
            tiny_flux_kontext_dir,
            tmp_path,
            edit_set,
            "model.train_mode=full",
            "trainer.num_steps=2",
            "eval.every=0",
            "eval.at_start=false",
            "actor.ema.enabled=false",
            "eval.use_ema=false",
        ),
    )
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"] and float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    final = trainer.policy.transformer.state_dict()
    assert sum(not torch.equal(initial[k], final[k]) for k in initial) > len(initial) // 2  # the whole model moved
    transformer = FluxTransformer2DModel.from_pretrained(tmp_path / "checkpoint-final" / "transformer")
    pipe = FluxKontextPipeline.from_pretrained(tiny_flux_kontext_dir, transformer=transformer)
    for name, tensor in pipe.transformer.state_dict().items():
        assert torch.equal(tensor, final[name].to(tensor.dtype)), name


def test_prompt_groups_carry_their_sources_to_the_trajectories(kontext, edit_set):
    """The collector's trajectories keep each sample's source paths in its metadata (rewards,
    the sample table and sheets read them) and its encoded source in the condition (replay)."""
    policy, _, _ = kontext
    path = str(edit_set / "images/train_02.png")
    batch = sample_one_group(policy, path)
    assert [m[SOURCE_KEY] for m in batch.metadata] == [[path], [path]]
    assert batch.condition.table.source_latents.shape[:2] == (1, 1)  # one distinct (prompt, source) a step
    assert source_images(batch.metadata).shape == (2, 1, 3, 64, 64)


@pytest.mark.slow  # starts Ray and two workers (about a minute on an idle box); the plumbing is test_ray_rollout's
def test_ray_workers_sample_the_editing_prompts_as_in_process_bitwise(tiny_flux_kontext_dir, edit_set, tmp_path):
    """Two Ray rollout workers get the step's prompt groups (their sources in the metadata), each
    encodes them and samples its shard: the joined trajectories, sources included, equal the
    in-process ones bit for bit."""
    import ray
    from support import ray_rollout_setting

    from genalign.ray_session import init_ray
    from genalign.rollout.batch import cat_batches
    from genalign.rollout.engine import LocalRolloutEngine
    from genalign.training import setup

    cfg = load_config(
        RECIPE,
        overrides(
            tiny_flux_kontext_dir,
            tmp_path,
            edit_set,
            "/base/distributed=ray_rollout",
            "rollout.num_workers=2",
            "distributed.resources.rollout.num_workers=2",
            "model.gradient_checkpointing=false",
        ),
    )
    init_ray(num_cpus=2, log_to_driver=False)
    try:
        policy, sampler, engine = ray_rollout_setting(cfg)
        try:
            spec = setup.rollout_spec(cfg)
            groups = sampler.sample(1)
            local = LocalRolloutEngine(policy).generate(groups, spec)
            remote = cat_batches(list(engine.generate_chunks(groups, spec)))
        finally:
            engine.close()
    finally:
        ray.shutdown()
    assert remote.metadata == local.metadata and all(m[SOURCE_KEY] for m in local.metadata)
    for name in ["latents", "log_probs", "images"]:
        assert torch.equal(getattr(remote, name), getattr(local, name)), name
    assert torch.equal(remote.condition.source_latents, local.condition.source_latents)
