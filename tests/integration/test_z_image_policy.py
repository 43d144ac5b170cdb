"""Z-Image (Turbo and base) on tiny random pipelines built from the family's architecture files:
the tiny models are those configs shrunk in width and depth only; our velocity + ODE kernel
reproduce ZImagePipeline's latents and images from the same noise (Turbo without CFG, base with
it, each with its own shift); the schedule is the pipeline's bit for bit; the exported LoRA loads
with `ZImagePipeline.load_lora_weights`; both shipped recipes (shrunk) train two steps at replay
parity 0 (Turbo's LoRA and full fine-tune, base's LoRA with CFG), and the exports load into
ZImagePipeline."""

from __future__ import annotations

import pytest
import torch
from support import (
    TINY_DEPTH,
    TINY_REDUCTION,
    assert_close_reordered,
    assert_lora_export_reproduces,
    ode_sample,
    perturb_lora_b,
    read_rows,
    tiny_overrides,
    train_recipe_in_process,
)

from genalign.models.z_image import ZImagePolicy
from genalign.models.z_image.policy import pipeline_timestep
from genalign.models.z_image.tiny import BASE, TURBO, build_tiny, published
from genalign.preflight.load import load_config
from genalign.sampling.trajectory import initial_noise

TURBO_RECIPE = "experiment/diffusion/z_image/turbo_online_grpo_pickscore"
BASE_RECIPE = "experiment/diffusion/z_image/online_grpo_pickscore"
MAX_TOKENS = 24
PROMPTS = ["a red circle on a blue square", "two cats"]
WIDTH_AND_DEPTH = {
    "transformer": {"dim", "n_heads", "n_kv_heads", "n_layers", "n_refiner_layers", "cap_feat_dim", "axes_dims"},
    "text_encoder": {
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "max_window_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",  # the tiny tokenizer's, and its ids of the special tokens
        "bos_token_id",
        "eos_token_id",
        "layer_types",  # transformers derives it from num_hidden_layers
    },
    "vae": {"block_out_channels", "layers_per_block", "norm_num_groups"},
}
"""The keys a tiny model may change: widths, depths (and the vocabulary, the tiny tokenizer's)."""


@pytest.fixture(scope="module")
def tiny_dirs(tiny_z_image_dir, tmp_path_factory) -> dict:
    """{"turbo": dir, "base": dir}: the family's tiny pipeline and the base model's form (the
    spec's `tiny_variants`), seed 0, written by save_pretrained."""
    from genalign.models.spec import family_spec

    base = tmp_path_factory.mktemp("tiny_z_image_base") / "pipeline"
    family_spec("z_image").build_tiny(0, "Tongyi-MAI/Z-Image").save_pretrained(base)
    return {"turbo": tiny_z_image_dir, "base": base}


def loaded(directory):
    from diffusers import ZImagePipeline

    policy = ZImagePolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS)
    return policy, ZImagePipeline.from_pretrained(directory)


@pytest.mark.parametrize("file_name", [TURBO, BASE])
def test_the_tiny_model_is_the_published_config_shrunk(file_name):
    """Every published key keeps its value except widths and depths; the scheduler is as published."""
    pipe = build_tiny(file_name, seed=0)
    body = published(file_name)
    for name, entry in body["components"].items():
        module = getattr(pipe, name)
        assert type(module).__name__ == entry["class"]
        tiny = dict(module.config) if entry["library"] == "diffusers" else transformers_config(module.config)
        changed = {k for k, v in entry["config"].items() if k in tiny and _norm(tiny[k]) != _norm(v)}
        missing = {k for k in entry["config"] if k not in tiny}
        assert changed <= WIDTH_AND_DEPTH[name], (name, changed - WIDTH_AND_DEPTH[name])
        assert not missing, (name, missing)
        assert changed, name  # it is shrunk
    scheduler = dict(pipe.scheduler.config)
    for key, value in body["pipeline"]["scheduler"]["config"].items():
        assert scheduler[key] == value, key


def transformers_config(config) -> dict:
    """A transformers config as its config.json states it: transformers 5 folds `rope_theta` and
    `rope_scaling` into `rope_parameters` (rope_type "default" = no scaling)."""
    out = config.to_dict()
    rope = out.get("rope_parameters") or {}
    if "rope_theta" in rope:
        out.setdefault("rope_theta", rope["rope_theta"])
        out.setdefault("rope_scaling", None if rope.get("rope_type") == "default" else rope)
    return out


def _norm(value):
    return list(value) if isinstance(value, tuple) else value


def test_turbo_and_base_differ_only_in_the_schedule_shift():
    turbo, base = published(TURBO), published(BASE)
    assert turbo["components"] == base["components"]
    shifts = [body["pipeline"]["scheduler"]["config"]["shift"] for body in (turbo, base)]
    assert shifts == [3.0, 6.0]


@pytest.mark.parametrize("kind", ["turbo", "base"])
def test_the_schedule_is_the_pipelines_bit_for_bit(tiny_dirs, kind):
    from diffusers.pipelines.z_image.pipeline_z_image import get_default_z_image_sigmas

    policy, pipe = loaded(tiny_dirs[kind])
    shape = policy.latent_shape(64, 96)
    ours = policy.sigmas(9, shape)
    pipe.scheduler.set_timesteps(sigmas=get_default_z_image_sigmas(9), mu=0.5)  # static shift: mu unread
    assert torch.equal(ours, pipe.scheduler.sigmas.to(torch.float32))
    assert torch.equal(pipeline_timestep(ours[:-1]), (1000 - pipe.scheduler.timesteps.float()) / 1000)


@pytest.mark.parametrize(("kind", "cfg_scale"), [("turbo", 1.0), ("base", 5.0), ("turbo", 2.5)])
def test_ode_sampling_reproduces_the_pipeline(tiny_dirs, kind, cfg_scale):
    """Our velocity + the ODE kernel from the same noise = ZImagePipeline's latents and images; our
    rollout.guidance_scale w is its guidance_scale w − 1 (v_c + g(v_c − v_u)), 1 = CFG off."""
    policy, pipe = loaded(tiny_dirs[kind])
    cond = policy.encode_prompts(PROMPTS, with_negative=cfg_scale > 1)
    start, ours = ode_sample(policy, cond, 64, 96, cfg_scale)
    common = dict(
        height=64,
        width=96,
        num_inference_steps=3,
        latents=start,
        guidance_scale=cfg_scale - 1.0,
        max_sequence_length=MAX_TOKENS,
    )
    # a fresh list each call: ZImagePipeline writes the chat-templated prompts into the list it is given
    theirs = pipe(prompt=list(PROMPTS), output_type="latent", **common).images  # [2, C, 8, 12]
    # the same math in another order (one list call vs ours), 3 steps, CFG gain |1 − w| + |w|
    assert_close_reordered(
        ours, theirs, length=TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=abs(1 - cfg_scale) + cfg_scale
    )
    assert (ours - start).abs().max() > 0.1  # the sample moved
    images = pipe(prompt=list(PROMPTS), output_type="pt", **common).images  # [2, 3, 64, 96] in [0, 1]
    decoded = policy.decode(ours)
    assert decoded.shape == (2, 3, 64, 96) and (decoded.float() - images * 255).abs().max() <= 1.0


def test_prompts_are_the_pipelines_encoding_padded_with_a_mask(tiny_dirs):
    policy, pipe = loaded(tiny_dirs["turbo"])
    theirs, _ = pipe.encode_prompt(list(PROMPTS), do_classifier_free_guidance=False, max_sequence_length=MAX_TOKENS)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    lengths = [row.shape[0] for row in theirs]
    assert lengths[0] != lengths[1] and cond.embeds.shape[1] == cond.negative_embeds.shape[1] >= max(lengths)
    for row, mask, expected in zip(cond.embeds, cond.mask, theirs):
        assert torch.equal(row[mask.bool()], expected) and not row[~mask.bool()].any()


def test_exported_lora_loads_into_z_image_pipeline_with_the_same_velocity(tiny_dirs, tmp_path):
    from diffusers import ZImagePipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    directory = tiny_dirs["turbo"]
    fresh, _ = loaded(directory)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    perturb_lora_b(fresh.transformer)
    pipe = ZImagePipeline.from_pretrained(directory)
    other = ZImagePolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS)
    cond = fresh.encode_prompts(PROMPTS, with_negative=True)
    latents = initial_noise([1, 2], [1, 2], fresh.latent_shape(64, 64))[0]
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, other, (latents, torch.tensor([0.7, 0.3]), cond, 3.0)
    )


def overrides(model_dir, output_dir, *extra):
    return tiny_overrides(
        model_dir,
        output_dir,
        "model.max_sequence_length=16",
        "reward.components.pickscore=0.0",
        "reward.batch_size=4",
        "rollout.sde_window.lo=0",
        "rollout.sde_window.hi=3",
        "rollout.sde_window.size=2",
        "actor.ema.enabled=false",
        "eval.use_ema=false",
        "trainer.num_steps=2",
        *extra,
    )


def assert_two_steps_at_parity_zero(out) -> None:
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0


def test_recipes_follow_their_references():
    turbo = load_config(TURBO_RECIPE, [])
    assert (turbo.model.family, turbo.model.path, turbo.rollout.guidance_scale) == (
        "z_image",
        "Tongyi-MAI/Z-Image-Turbo",
        1.0,
    )
    assert (turbo.rollout.num_steps, turbo.rollout.noise_level, turbo.rollout.n, turbo.eval.num_steps) == (
        6,
        0.7,
        16,
        10,
    )
    assert (turbo.model.lora.rank, turbo.model.lora.alpha, len(turbo.model.lora.target_modules)) == (64, 128.0, 7)
    # Flow-Factory's two optimizer steps a round: 6 prompts x 16 samples / micro-batch 1 / 48
    assert 6 * 16 // turbo.actor.micro_batch_size // turbo.actor.gradient_accumulation_steps == 2
    base = load_config(BASE_RECIPE, [])
    assert (base.model.path, base.rollout.guidance_scale, base.rollout.num_steps) == ("Tongyi-MAI/Z-Image", 5.0, 16)
    assert base.rollout.sde_window.bounds_range(base.rollout.num_steps) == (0, 8)  # the first half
    assert (base.rollout.sde_window.size, base.model.lora.init) == (3, "default")
    assert base.algorithm.kl_beta == turbo.algorithm.kl_beta == 0.0 and base.model.gradient_checkpointing
    assert 8 * 16 // base.actor.micro_batch_size // base.actor.gradient_accumulation_steps == 2


def test_turbo_lora_trains_two_steps_at_parity_zero_and_loads_into_the_pipeline(tiny_dirs, tmp_path):
    from diffusers import ZImagePipeline

    trainer, initial = train_recipe_in_process(TURBO_RECIPE, overrides(tiny_dirs["turbo"], tmp_path))
    assert_two_steps_at_parity_zero(tmp_path)
    final = trainer.policy.transformer.state_dict()
    moved = {k for k in initial if not torch.equal(initial[k], final[k])}
    assert moved and all("lora" in k for k in moved)
    pipe = ZImagePipeline.from_pretrained(tiny_dirs["turbo"])

    def render():
        generator = torch.Generator().manual_seed(0)
        return pipe(
            prompt="two cats",
            height=64,
            width=64,
            num_inference_steps=2,
            guidance_scale=0.0,
            max_sequence_length=16,
            generator=generator,
            output_type="pt",
        ).images

    before = render()
    pipe.load_lora_weights(tmp_path / "checkpoint-final" / "lora")
    assert not torch.allclose(before, render())


def test_base_lora_with_cfg_trains_two_steps_at_parity_zero(tiny_dirs, tmp_path):
    train_recipe_in_process(BASE_RECIPE, overrides(tiny_dirs["base"], tmp_path, "eval.every=0", "eval.at_start=false"))
    assert_two_steps_at_parity_zero(tmp_path)
    assert (tmp_path / "checkpoint-final" / "lora" / "pytorch_lora_weights.safetensors").exists()


def test_full_fine_tune_trains_two_steps_and_its_transformer_loads_into_the_pipeline(tiny_dirs, tmp_path):
    from diffusers import ZImagePipeline, ZImageTransformer2DModel

    extra = ("model.train_mode=full", "eval.every=0", "eval.at_start=false")
    trainer, initial = train_recipe_in_process(TURBO_RECIPE, overrides(tiny_dirs["turbo"], tmp_path, *extra))
    assert_two_steps_at_parity_zero(tmp_path)
    final = trainer.policy.transformer.state_dict()
    assert sum(not torch.equal(initial[k], final[k]) for k in initial) > len(initial) // 2  # the whole model moved
    transformer = ZImageTransformer2DModel.from_pretrained(tmp_path / "checkpoint-final" / "transformer")
    pipe = ZImagePipeline.from_pretrained(tiny_dirs["turbo"], transformer=transformer)
    for name, tensor in pipe.transformer.state_dict().items():
        assert torch.equal(tensor, final[name].to(tensor.dtype)), name


@pytest.mark.parametrize(("recipe", "peak_gib"), [(TURBO_RECIPE, 39.2), (BASE_RECIPE, 28.7)])
def test_the_recipes_plan_for_one_48_gb_card(recipe, peak_gib):
    """What docs/models.md and docs/memory_plan.md say each recipe needs is its memory plan: one
    process on a 48 GB card (peak within 0.9 of it), over a 6.15 B-parameter transformer (the
    model card's "6B") and the 4 B Qwen3 encoder counted from the architecture files."""
    from genalign.models.architecture import load_architecture
    from genalign.models.spec import family_spec
    from genalign.preflight import memory_plan

    cfg = load_config(recipe, [], check_files=False)
    plan = memory_plan.estimate_memory(cfg)
    assert plan.roles[0].peak_bytes / 2**30 == pytest.approx(peak_gib, abs=0.05)
    assert plan.roles[0].peak_bytes <= 0.9 * 48 * 2**30
    arch = load_architecture(family_spec("z_image"), cfg.model.path)
    assert 6.0e9 < arch.component("transformer").parameters < 6.3e9
    assert 3.9e9 < arch.component("text_encoder").parameters < 4.1e9
    assert (arch.hidden_size, arch.num_layers, arch.text_width) == (3840, 34, 2560)
