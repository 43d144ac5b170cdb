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
from support import TIMING_COLUMNS, assert_resumed_bitwise, read_rows, tiny_overrides

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
    # NextStep-1's head sampler (Euler-Maruyama, diffusion 2σ) as the toy flow model's SDE:
    # the kernel trains a flow family end to end (the parity preflight on by default), resumes exactly
    "shapes_grpo": ["rollout.kernel=em_sde"],
    # 2 sampling batches per step, each with its own window (the recipe pins one per step)
    "shapes_flow_grpo_fast": ["rollout.sample_batch_size=2", "rollout.sde_window.draw=per_batch"],
    "shapes_cps": [],
    "shapes_dance_grpo": [],
    "shapes_grpo_guard": [],
    # one sampling batch of 4, so each step's window is the one the recipe draws per step
    "shapes_flow_dppo": [],
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
    rows = read_rows(first / "metrics.csv")
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # replay = rollout, bitwise
    uninterrupted = rows[2]
    again = read_rows(resumed / "metrics.csv")
    assert [r["step"] for r in again] == ["3"]
    for key, value in uninterrupted.items():
        if key not in TIMING_COLUMNS:
            assert again[0].get(key, "") == value, key
    a = load_file(str(first / "checkpoint-final" / "trainable.safetensors"))
    b = load_file(str(resumed / "checkpoint-final" / "trainable.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


SD3_FLOW_DPPO = "experiment/diffusion/sd3_5/online_flow_dppo_pickscore"


def test_sd3_flow_dppo_recipe_runs_and_resumes_bitwise(tiny_sd3_dir, tmp_path):
    """The SD3.5 Flow-DPPO recipe on a tiny random SD3 (its 3 steps hold a window of one; JPEG
    size in place of PickScore): replay is on-policy, the KL mask's columns are logged, and a
    resume from checkpoint-2 logs step 3 and ends with the uninterrupted run's weights."""

    def overrides(out, *extra):
        return tiny_overrides(
            tiny_sd3_dir, out, "reward.components.pickscore=0.0", "rollout.sde_window.size=1", "eval.every=0", *extra
        )

    first = tmp_path / "run"
    Trainer(load_config(SD3_FLOW_DPPO, overrides(first))).train()
    rows = read_rows(first / "metrics.csv")
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    for name in ("step_kl", "step_kl_max", "kl_high_frac", "dropped_frac", "ratio"):
        assert rows[-1][name] != "", name
    resumed = tmp_path / "resumed"
    Trainer(load_config(SD3_FLOW_DPPO, overrides(resumed, f"trainer.resume_from={first / 'checkpoint-2'}"))).train()
    assert_resumed_bitwise(first, resumed, 3)
