"""The SD3.5 AWM OCR recipe on a tiny random SD3 through the real diffusers path: the loop runs
with the recipe's algorithm settings (only the sizes shrunk, the jpeg reward standing in for OCR
as in test_train_loop.py), trains the LoRA, and resumes bitwise with its anchor."""

from __future__ import annotations

import pytest
import torch
from support import assert_resumed_bitwise, read_rows, tiny_overrides

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

RECIPE = "experiment/diffusion/sd3_5/online_awm_ocr"
# 4 samples in micro-batches of 2, both accumulated into the step's one update (the recipe's
# on-policy setting); 4 schedule steps leave indices 1..3 for the 6 strata
SIZES = ["actor.micro_batch_size=2", "actor.gradient_accumulation_steps=2", "rollout.num_steps=4"]


@pytest.fixture(scope="module")
def finished_run(tiny_sd3_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("awm_sd3")
    trainer = Trainer(load_config(RECIPE, tiny_overrides(tiny_sd3_dir, out, *SIZES)))
    initial = {k: v.clone() for k, v in trainer.policy.transformer.state_dict().items()}
    trainer.train()
    return out, trainer, initial


def test_awm_trains_the_sd3_lora_with_its_columns(finished_run):
    out, trainer, initial = finished_run
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    for column in ("awm_matching_loss", "awm_anchor_kl", "awm_anchor_decay", "kl", "loss"):
        assert column in rows[0], column
    assert float(rows[-1]["awm_anchor_decay"]) == pytest.approx(0.003)  # one update a step, 0.001 each
    changed = [k for k, v in trainer.policy.transformer.state_dict().items() if not torch.equal(v, initial[k])]
    assert changed and all("lora" in k for k in changed)
    assert (out / "checkpoint-final" / "algorithm.safetensors").exists()


def test_awm_sd3_resumes_bitwise(finished_run, tiny_sd3_dir, tmp_path):
    out, _, _ = finished_run
    resumed = tmp_path / "resumed"
    overrides = tiny_overrides(tiny_sd3_dir, resumed, *SIZES, f"trainer.resume_from={out / 'checkpoint-2'}")
    Trainer(load_config(RECIPE, overrides)).train()
    assert_resumed_bitwise(out, resumed, 3, ("trainable.safetensors", "algorithm.safetensors"))
