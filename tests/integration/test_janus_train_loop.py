"""The whole loop for Janus-Pro (token-autoregressive) on the tiny JanusForConditionalGeneration,
through the shipped recipe shrunk to seconds: rollout → reward → AR-GRPO update → checkpoint →
resume (bitwise) → eval, with the parity preflight exact, only the LoRA moving, and the
checkpoint's exported adapter loading onto JanusForConditionalGeneration."""

from __future__ import annotations

import copy

import pytest
import torch
from support import assert_resumed_bitwise, read_rows

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

RECIPE = "experiment/autoregressive/janus_pro/online_grpo_ocr"


def overrides(model_dir, output_dir, *extra):
    return [
        f"model.path={model_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "rollout.height=32",
        "rollout.width=32",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        "actor.lr=1e-2",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        "eval.max_prompts=2",
        "eval.batch_size=2",
        "eval.every=2",
        "trainer.num_steps=3",
        "trainer.save_every=1",
        f"trainer.output_dir={output_dir}",
        "trainer.progress_bar=false",
        *extra,
    ]


@pytest.fixture(scope="module")
def finished_run(tiny_janus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run_janus")
    trainer = Trainer(load_config(RECIPE, overrides(tiny_janus_dir, out)))
    initial = copy.deepcopy(trainer.policy.transformer.state_dict())  # before any update
    trainer.train()
    return out, trainer, initial


def test_recipe_composes_with_janus_settings():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path, cfg.model.train_mode) == (
        "janus",
        "deepseek-community/Janus-Pro-7B",
        "lora",
    )
    assert (cfg.rollout.height, cfg.rollout.guidance_scale, cfg.rollout.temperature, cfg.rollout.n) == (
        384,
        5.0,
        1.0,
        8,
    )
    assert (cfg.algorithm.name, cfg.algorithm.clip_range, cfg.algorithm.kl_beta) == ("ar_grpo", 0.2, 0.01)
    assert (cfg.algorithm.advantage.std, cfg.algorithm.advantage.global_std) == ("unbiased", False)
    small = load_config(RECIPE, ["/model/autoregressive/janus_pro=pro_1b"])
    assert small.model.path == "deepseek-community/Janus-Pro-1B"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["algorithm.name=grpo"], "generates image tokens"),
        (
            [
                "model.family=sd3",
                "model.path=stabilityai/stable-diffusion-3.5-medium",
                "rollout.temperature=1.0",
                "rollout.height=512",
                "rollout.width=512",
            ],
            "trains image tokens",
        ),
        (["rollout.temperature=0"], "rollout.temperature must be > 0"),
        (["rollout.same_initial_noise=true"], "rollout.same_initial_noise=True shapes an SDE rollout"),
        (["algorithm.token_log_prob=cond"], "algorithm.token_log_prob='cond' is not supported"),
    ],
)
def test_kind_mismatches_are_config_errors(extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config(RECIPE, extra)


def test_run_trains_only_the_lora_and_writes_every_artefact(finished_run):
    out, trainer, initial = finished_run
    for name in [
        "metrics.csv",
        "eval_metrics.csv",
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-final",
        "eval_epoch_0/contact_sheet.png",
        "eval_epoch_3/contact_sheet.png",
        "checkpoint-final/lora/adapter_model.safetensors",
        "checkpoint-final/lora/adapter_config.json",
    ]:
        assert (out / name).exists(), name
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert all(float(r["kl"]) >= 0 for r in rows) and float(rows[-1]["kl"]) > 0  # the k3 KL moves off 0
    final = trainer.policy.transformer.state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], final[k])}
    assert changed and all("lora" in k for k in changed), sorted(changed)[:5]


def test_resume_continues_bitwise(finished_run, tiny_janus_dir, tmp_path):
    out, _, _ = finished_run
    cfg = load_config(
        RECIPE, overrides(tiny_janus_dir, tmp_path / "resumed", f"trainer.resume_from={out / 'checkpoint-2'}")
    )
    Trainer(cfg).train()
    assert_resumed_bitwise(out, tmp_path / "resumed", 3)


def test_standalone_eval_of_the_checkpoint_repeats_the_runs_last_evaluation(finished_run, tmp_path):
    from genalign.training.checkpoint_eval import evaluate_checkpoint

    out, _, _ = finished_run
    metrics = evaluate_checkpoint(str(out / "checkpoint-final"), str(tmp_path / "eval"), [])
    last = read_rows(out / "eval_metrics.csv")[-1]
    assert last["step"] == "3" and metrics["eval_reward_mean"] == pytest.approx(float(last["eval_reward_mean"]), abs=0)
    assert (tmp_path / "eval" / "eval_epoch_3" / "contact_sheet.png").exists()


def test_checkpoint_adapter_loads_onto_janus_and_matches_the_trained_policy(finished_run, tiny_janus_dir):
    from peft import PeftModel
    from transformers import JanusForConditionalGeneration

    from genalign.models.janus import JanusPolicy

    out, trainer, _ = finished_run
    loaded = PeftModel.from_pretrained(
        JanusForConditionalGeneration.from_pretrained(str(tiny_janus_dir)), str(out / "checkpoint-final" / "lora")
    ).eval()
    reloaded = JanusPolicy(loaded.get_base_model(), trainer.policy.processor, torch.device("cpu"), torch.float32)
    cond = trainer.policy.encode_prompts(["a sign"], with_negative=True)
    tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(
            trainer.policy.token_log_probs(cond, tokens, 5.0, 1.0),
            reloaded.token_log_probs(cond, tokens, 5.0, 1.0),
            atol=1e-6,
        )
    card = (out / "checkpoint-final" / "lora" / "README.md").read_text()
    assert "PeftModel.from_pretrained" in card and "JanusForConditionalGeneration" in card
