"""The permanent end-to-end learning test: the CPU demo must actually learn, and not be fooled.

Each test runs a toy recipe through the CLI (`genalign train`, fixed seeds) and reads the run
directory. Thresholds sit below what was measured on the 2-core project box (see the report
in the recipe and `benchmarks/bench_default_run.py`); they check direction and size, which a
broken optimiser, a sign error or a leaky control cannot pass. Marked `slow` (minutes each).
"""

from __future__ import annotations

import time

import pytest
from support import train_recipe as run

from genalign.models.toy.policy import builtin_dir

pytestmark = pytest.mark.slow

PATTERN_GROWTH = 7.0
"""Largest rise of toy_patch_pattern (RGB units) over the default run: +5.5 measured."""


def mean_of(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def test_default_recipe_learns_shapes_on_held_out_colours(tmp_path):
    """Issue 10: the default run shows real learning within its bounds, with a fixed seed.

    Held-out eval reward +0.20 and judge (gold) +0.15 over the run, the reward-hacking monitor
    silent, the image-quality guard (off-shape pixels, background deviation from the canvas
    grey, painted area) no worse at the end than at the start, the patch-grid motif kept from
    growing past what was measured, parity at the first update and
    <= 5 MB of shipped assets. The 4-minute bound is measured by benchmarks/bench_default_run.py,
    not asserted here: a timed test would fail on a busy machine, not on a slow demo."""
    start = time.perf_counter()
    metrics, evals = run("experiment/toy/shapes_grpo", tmp_path)
    seconds = time.perf_counter() - start
    assert metrics[0]["parity_max_abs_log_prob_diff"] <= 1e-6
    first, last = evals[0], evals[-1]
    assert first["step"] == 0 and last["step"] == len(metrics)
    assert last["eval_reward_mean"] - first["eval_reward_mean"] >= 0.20
    assert last["gold_mean"] - first["gold_mean"] >= 0.15
    assert all(r["gold_divergence"] == 0.0 for r in evals)
    assert last["quality_toy_off_shape_fraction_mean"] <= first["quality_toy_off_shape_fraction_mean"] + 0.005
    # +2.5 RGB units: the base's own grain is ~5.4 and a visibly dirty canvas is ~15+. Measured at
    # step 60: +0.67 (docs run), +0.63 / +1.11 with 2 / 1 threads on a later box, and across
    # seeds 42-44 and every 5th step the value wanders 4.9-7.8 (+2.4 at most) while the edges
    # stay clean, so a +1 bound fails on run-to-run grain, not on a dirtier canvas.
    assert last["quality_toy_background_deviation_mean"] <= first["quality_toy_background_deviation_mean"] + 2.5
    assert last["quality_toy_shape_area_mean"] <= 0.6  # no canvas-filling blobs (a render covers 0.16-0.72)
    # The 4x4 patch-grid motif (docs/demo.md, "What the pictures show") grows late in this run:
    # measured 2.0 -> 7.5 at step 60 (seed 42, one thread), visible in purple shapes. The bound
    # stops it growing past that; a clean render scores about 0.1.
    assert last["quality_toy_patch_pattern_mean"] <= first["quality_toy_patch_pattern_mean"] + PATTERN_GROWTH
    for step in (0, len(metrics)):
        assert (tmp_path / f"eval_epoch_{step}" / "contact_sheet.png").is_file()
    print(f"default run: {seconds:.0f} s (the 4-minute target is the benchmark's to measure)")
    assert sum(f.stat().st_size for f in builtin_dir().rglob("*") if f.is_file()) <= 5 * 2**20


def test_color_area_hacking_is_flagged_by_the_gold_monitor(tmp_path):
    """Acceptance 3: the rule reward rises >= 0.40 in 30 steps and the monitor fires."""
    metrics, evals = run("experiment/toy/color_area_hacking", tmp_path)
    assert len(metrics) == 30
    assert mean_of(metrics[-3:], "reward_mean") - mean_of(metrics[:3], "reward_mean") >= 0.40
    assert any(r["gold_divergence"] == 1.0 for r in evals)


def test_negated_reward_drives_shape_probability_down(tmp_path):
    """Acceptance 4a: with weight -1 the (raw) shape reward falls by >= 0.15 on the eval prompts.

    The control checks the sign of the whole pipeline, so it runs the optimiser harder
    (lr 1e-3, no KL, 40 steps): with the default recipe's lr and KL the fall is real but slow
    (measured -0.07 on the held-out eval and -0.09 on training prompts after 80-120 steps)."""
    _, evals = run(
        "experiment/toy/shapes_grpo",
        tmp_path,
        "reward.components.toy_shape=-1.0",
        "actor.lr=1e-3",
        "algorithm.kl_beta=0",
        "trainer.num_steps=40",
    )
    assert evals[-1]["step"] == 40
    assert evals[0]["eval_reward_toy_shape_mean"] - evals[-1]["eval_reward_toy_shape_mean"] >= 0.15


def test_random_reward_does_not_raise_shape_quality(tmp_path):
    """Acceptance 4b: a reward that ignores the images raises the judge's shape score by <= 0.05."""
    _, evals = run(
        "experiment/toy/shapes_grpo", tmp_path, "reward.components.toy_shape=0", "reward.components.random=1.0"
    )
    assert evals[-1]["gold_mean"] - evals[0]["gold_mean"] <= 0.05
