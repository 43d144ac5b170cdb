"""Checkpoint/resume exactness of the GRPO variant recipes on the toy demo model.

Each recipe runs 3 steps with a checkpoint after every step; a second run resumes from
checkpoint-2 and must log a bitwise-identical step 3 and end with identical weights. The
MixGRPO window moves every step here (shift_every=1) and Flow-GRPO-Fast draws a new random
window for each of its two sampling batches every step, so a window that were not a pure
function of (step, sampling batch) would differ.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from support import TIMING_COLUMNS, read_rows

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

SMALL = [
    "rollout.n=2",
    "rollout.rollout_batch_size=2",
    "rollout.sample_batch_size=4",
    "reward.batch_size=4",
    "eval.every=0",
    "eval.max_prompts=1",
    "eval.samples_per_prompt=2",
    "eval.batch_size=2",
    "trainer.num_steps=3",
    "trainer.save_every=1",
    "trainer.progress_bar=false",
]
RECIPES = {
    "shapes_mix_grpo": ["rollout.sde_window.shift_every=1"],
    # 2 sampling batches per step, each with its own window (the recipe pins one per step)
    "shapes_flow_grpo_fast": ["rollout.sample_batch_size=2", "rollout.sde_window.draw=per_batch"],
    "shapes_cps": [],
    "shapes_dance_grpo": [],
    "shapes_grpo_guard": [],
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_variant_resume_is_bitwise(recipe, tmp_path):
    name = f"experiment/toy/{recipe}"
    first = tmp_path / "run"
    Trainer(load_config(name, [*SMALL, *RECIPES[recipe], f"trainer.output_dir={first}"])).train()
    resumed = tmp_path / "resumed"
    Trainer(
        load_config(
            name,
            [
                *SMALL,
                *RECIPES[recipe],
                f"trainer.output_dir={resumed}",
                f"trainer.resume_from={first / 'checkpoint-2'}",
            ],
        )
    ).train()
    uninterrupted = read_rows(first / "metrics.csv")[2]
    again = read_rows(resumed / "metrics.csv")
    assert [r["step"] for r in again] == ["3"]
    for key, value in uninterrupted.items():
        if key not in TIMING_COLUMNS:
            assert again[0].get(key, "") == value, key
    a = load_file(str(first / "checkpoint-final" / "trainable.safetensors"))
    b = load_file(str(resumed / "checkpoint-final" / "trainable.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
