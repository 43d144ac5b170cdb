"""The whole loop on a tiny SD3 pipeline loaded from disk through the real diffusers path.

Recipe: the seed's OCR recipe with overrides that shrink it to seconds on a CPU. The jpeg
reward stands in for OCR where a learning signal is needed (OCR on random tiny-model images
is 0 for every sample, so every advantage would be 0).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from support import SD3_RECIPE as RECIPE
from support import TIMING_COLUMNS, assert_resumed_bitwise, read_rows, tiny_overrides

from genalign.preflight.load import load_config
from genalign.reporting.provenance import read_provenance
from genalign.runs.resume import ResumeError
from genalign.training.trainer import Trainer


@pytest.fixture(scope="module")
def finished_run(tiny_sd3_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = load_config(RECIPE, tiny_overrides(tiny_sd3_dir, out))
    trainer = Trainer(cfg)
    initial = {k: v.clone() for k, v in trainer.policy.transformer.state_dict().items()}
    started = time.perf_counter()
    trainer.train()
    trainer.wall_seconds = time.perf_counter() - started
    return out, trainer, initial


def test_run_directory_has_every_artefact(finished_run):
    out, _, _ = finished_run
    for name in [
        "config.yaml",
        "metrics.csv",
        "eval_metrics.csv",
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-final",
        "eval_epoch_0/contact_sheet.png",
        "eval_epoch_2/contact_sheet.png",
        "eval_epoch_3/contact_sheet.png",
        "checkpoint-final/lora/pytorch_lora_weights.safetensors",
    ]:
        assert (out / name).exists(), name
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    for column in [
        "reward_mean",
        "reward_std",
        "reward_min",
        "reward_max",
        "reward_jpeg_compressibility_mean",
        "zero_std_ratio",
        "adv_mean",
        "adv_std",
        "loss",
        "policy_loss",
        "kl",
        "clip_frac",
        "approx_kl",
        "ratio",
        "ratio_min",
        "ratio_max",
        "grad_norm",
        "lr",
        *TIMING_COLUMNS - {"time_eval_s"},
    ]:
        assert column in rows[0], column
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    eval_rows = read_rows(out / "eval_metrics.csv")
    assert [r["step"] for r in eval_rows] == ["0", "2", "3"]
    assert not any(Path(out).glob(".checkpoint-*"))


def test_run_writes_its_report_and_provenance(finished_run):
    out, _, _ = finished_run
    launches = read_provenance(out)["launches"]
    assert [launch["start_step"] for launch in launches] == [1]
    assert launches[0]["packages"]["diffusers"] and launches[0]["git"] is None or launches[0]["git"]["commit"]
    html = (out / "report.html").read_text()  # the final rewrite, after checkpoint-final
    assert 'id="status">finished · 3 steps' in html
    assert 'id="eval-3" open' in html and 'id="eval-2">' in html  # step 0 beside each later eval
    assert 'id="plot-train_reward"' in html and 'id="plot-eval_reward"' in html
    assert "exact" in html  # the parity preflight of step 1


def test_phase_seconds_are_per_step_and_add_up(finished_run):
    out, trainer, _ = finished_run
    rows = read_rows(out / "metrics.csv")
    for row in rows:
        phases = [float(row[k]) for k in ("time_rollout_s", "time_reward_s", "time_train_s")]
        assert all(0 <= p for p in phases)
        assert float(row["time_cpu_s"]) > 0  # the process's CPU seconds for the step
        assert float(row["time_step_s"]) >= sum(phases)  # the whole step's wall seconds, the weights' sync too
        assert sum(phases) + float(row.get("time_eval_s") or 0) < trainer.wall_seconds
    assert (
        sum(float(r["time_rollout_s"]) + float(r["time_reward_s"]) + float(r["time_train_s"]) for r in rows)
        < trainer.wall_seconds
    )


def test_training_changes_lora_weights_and_nothing_else(finished_run):
    _, trainer, initial = finished_run
    final = trainer.policy.transformer.state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], final[k])}
    assert changed, "no weight changed"
    assert all("lora" in k for k in changed), sorted(changed)[:5]
    # text encoders and VAE are frozen
    assert not any(p.requires_grad for p in trainer.policy.vae.parameters())


def test_first_update_is_on_policy(finished_run):
    out, _, _ = finished_run
    first = read_rows(out / "metrics.csv")[0]
    # accumulation 1: the first micro-batch replays unchanged weights, later ones do not;
    # the parity preflight covers every sample and is exactly zero
    assert float(first["parity_max_abs_log_prob_diff"]) == 0.0


def test_resume_continues_bitwise(finished_run, tiny_sd3_dir, tmp_path):
    out, _, _ = finished_run
    cfg = load_config(
        RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path / "resumed", f"trainer.resume_from={out / 'checkpoint-2'}")
    )
    Trainer(cfg).train()
    assert_resumed_bitwise(out, tmp_path / "resumed", 3, ("trainable.safetensors", "ema.safetensors"))


def test_resume_with_incompatible_config_lists_the_keys(finished_run, tiny_sd3_dir, tmp_path):
    out, _, _ = finished_run
    cfg = load_config(
        RECIPE,
        tiny_overrides(
            tiny_sd3_dir, tmp_path / "bad", "rollout.n=4", "actor.lr=0.5", f"trainer.resume_from={out / 'checkpoint-2'}"
        ),
    )
    with pytest.raises(ResumeError) as err:
        Trainer(cfg)
    assert "rollout.n" in str(err.value) and "actor.lr" in str(err.value)


def test_exported_lora_loads_into_a_diffusers_pipeline_and_changes_output(finished_run, tiny_sd3_dir):
    from diffusers import StableDiffusion3Pipeline

    out, _, _ = finished_run

    def render(pipe):
        return pipe(
            'a sign that says "hi"',
            num_inference_steps=2,
            height=64,
            width=64,
            guidance_scale=1.0,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images

    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3_dir)
    before = render(pipe)
    pipe.load_lora_weights(out / "checkpoint-final" / "lora")
    after = render(pipe)
    assert not torch.allclose(before, after)
