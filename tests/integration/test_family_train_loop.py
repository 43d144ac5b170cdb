"""The whole loop (rollout → reward → update → checkpoint → resume → eval) for FLUX and
Qwen-Image on their tiny pipelines, through each family's shipped recipe shrunk by the shared
`tiny_overrides`: the recipe composes, a run finishes with every artefact, training moves only
the LoRA, a resume from a checkpoint continues bitwise, and the exported `lora/` loads into the
family's own diffusers pipeline and changes what it renders."""

from __future__ import annotations

import pytest
import torch
from support import assert_resumed_bitwise, read_rows, tiny_overrides, train_recipe_in_process

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

RECIPES = {
    "flux": "experiment/diffusion/flux/online_grpo_ocr",
    "qwen_image": "experiment/diffusion/qwen_image/online_grpo_ocr",
}
WINDOW = {"qwen_image": ("rollout.sde_window.size=1",)}
"""Qwen-Image's window of 2 in the first half of 10 steps, shrunk to the tiny run's 2 steps."""


def overrides(model_dir, output_dir, *extra):
    return tiny_overrides(
        model_dir, output_dir, "model.max_sequence_length=16", "rollout.num_steps=2", "trainer.num_steps=3", *extra
    )


@pytest.fixture(scope="module", params=sorted(RECIPES))
def finished_run(request, tiny_flux_dir, tiny_qwen_image_dir, tmp_path_factory):
    family = request.param
    model_dir = {"flux": tiny_flux_dir, "qwen_image": tiny_qwen_image_dir}[family]
    out = tmp_path_factory.mktemp(f"run_{family}")
    trainer, initial = train_recipe_in_process(RECIPES[family], overrides(model_dir, out, *WINDOW.get(family, ())))
    assert trainer.policy.family == family
    return family, model_dir, out, trainer, initial


def test_recipes_compose_with_the_familys_settings():
    flux = load_config(RECIPES["flux"], [])
    assert (flux.model.family, flux.model.embedded_guidance) == ("flux", 3.5)
    assert flux.model.path == "black-forest-labs/FLUX.1-dev"
    assert (flux.rollout.num_steps, flux.rollout.guidance_scale, flux.rollout.noise_level) == (6, 1.0, 0.9)
    assert flux.algorithm.kl_beta == 0.0 and flux.eval.num_steps == 28
    qwen = load_config(RECIPES["qwen_image"], [])
    assert (qwen.model.family, qwen.model.path, qwen.model.embedded_guidance) == ("qwen_image", "Qwen/Qwen-Image", None)
    assert (qwen.rollout.num_steps, qwen.rollout.guidance_scale, qwen.rollout.noise_level) == (10, 4.0, 1.2)
    assert qwen.model.max_sequence_length == 512 and not qwen.actor.ema.enabled and qwen.eval.num_steps == 50
    assert (flux.model.lora.rank, flux.model.lora.alpha, len(flux.model.lora.target_modules)) == (64, 128.0, 12)
    assert (qwen.model.lora.rank, qwen.model.lora.alpha, len(qwen.model.lora.target_modules)) == (64, 128.0, 12)


def test_run_trains_only_the_lora_and_writes_every_artefact(finished_run):
    family, _, out, trainer, initial = finished_run
    for name in [
        "metrics.csv",
        "eval_metrics.csv",
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-final",
        "eval_epoch_3/contact_sheet.png",
        "checkpoint-final/lora/pytorch_lora_weights.safetensors",
    ]:
        assert (out / name).exists(), name
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert [r["step"] for r in read_rows(out / "eval_metrics.csv")] == ["0", "2", "3"]
    final = trainer.policy.transformer.state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], final[k])}
    assert changed and all("lora" in k for k in changed), sorted(changed)[:5]


def test_resume_continues_bitwise(finished_run, tmp_path):
    family, model_dir, out, _, _ = finished_run
    cfg = load_config(
        RECIPES[family],
        overrides(
            model_dir, tmp_path / "resumed", *WINDOW.get(family, ()), f"trainer.resume_from={out / 'checkpoint-2'}"
        ),
    )
    Trainer(cfg).train()
    assert_resumed_bitwise(out, tmp_path / "resumed", 3)


def test_exported_lora_changes_what_the_familys_pipeline_renders(finished_run):
    import diffusers

    family, model_dir, out, trainer, _ = finished_run
    pipe = getattr(diffusers, trainer.policy.diffusers_pipeline).from_pretrained(model_dir)
    extra = {"guidance_scale": 3.5} if family == "flux" else {}

    def render():
        return pipe(
            'a sign that says "hi"',
            num_inference_steps=2,
            height=64,
            width=64,
            max_sequence_length=16,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
            **extra,
        ).images

    before = render()
    pipe.load_lora_weights(out / "checkpoint-final" / "lora")
    assert not torch.allclose(before, render())
