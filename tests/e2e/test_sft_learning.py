"""Learning tests of flow-matching SFT on the CPU demo (fixed seed 42; the dataset pair runs in the
default suite, about 35 s each on an idle core with no rollout; the best-of-N pair is slow).

`experiment/toy/shapes_sft` fine-tunes the demo model on the shipped image dataset (renders of
the prompted shape, genalign/datasets/toy/sft/) and compares the held-out evaluation (8
held-out-colour prompts x 16 samples, Euler ODE) at step 0 and at the end: the `toy_shape`
reward and the independent judge (`gold_mean`) must rise. Its negated control trains the same
recipe on the model's own worst samples (the `rejected` images of the shipped preference set,
each group's lowest-reward sample): the shape reward must not rise, it falls. Online
(`experiment/toy/shapes_sft_best_of_n`), best of 8 per prompt on the reward must raise both;
with the reward negated it keeps the worst of 8, and the shape reward falls.

Measured on the current demo base (seed 42, one thread, step 0 -> 40; step 0 is 0.453 reward /
0.470 judge):
  dataset      held-out reward 0.661 (+0.208), judge 0.655 (+0.185)
  best of 8    held-out reward 0.644 (+0.191), judge 0.646 (+0.176)
controls, held-out shape reward at step 40:
  SFT on the model's worst samples 0.375 (-0.078); worst of 8 (reward negated) 0.363 (-0.090)
Margins sit below the measurements. (A dataset rendered anywhere on the canvas at 0.45-0.85 of
its side, outside the 0.6-0.8 centred renders the demo model was pretrained on, did not teach
it: +0.008 at lr 1e-3; the shipped set uses the pretraining placement.)
"""

from __future__ import annotations

import json

import pytest
from support import train_recipe as run

from genalign.data.prompts import PACKAGED_DATASETS

RECIPE = "experiment/toy/shapes_sft"
BEST_OF_N = "experiment/toy/shapes_sft_best_of_n"
"""The same recipe on the best of 8 own Euler-ODE samples a prompt instead of the dataset."""
STEPS = 40
RISE = {"dataset": (0.10, 0.10), "best_of_n": (0.10, 0.10)}
"""Minimum rise of the held-out toy_shape reward and of the judge over STEPS."""
FALL = 0.04
"""Minimum fall of the held-out toy_shape reward under the controls."""


def budget() -> tuple[str, str]:
    return f"trainer.num_steps={STEPS}", f"eval.every={STEPS}"


def gain(evals: list[dict], key: str) -> float:
    assert evals[0]["step"] == 0 and evals[-1]["step"] == STEPS
    return evals[-1][key] - evals[0][key]


def worst_samples_manifest(tmp_path):
    """The model's own worst samples: each preference row's rejected image as an SFT row."""
    source = PACKAGED_DATASETS / "toy" / "preferences"
    manifest = tmp_path / "worst.jsonl"
    with (source / "pairs.jsonl").open() as rows, manifest.open("w") as out:
        for line in rows:
            row = json.loads(line)
            out.write(json.dumps({"prompt": row["prompt"], "image": str(source / row["rejected"])}) + "\n")
    return manifest


def test_sft_on_good_images_raises_held_out_reward_and_judge(tmp_path):
    _, evals = run(RECIPE, tmp_path, *budget())
    assert gain(evals, "eval_reward_toy_shape_mean") >= RISE["dataset"][0]
    assert gain(evals, "gold_mean") >= RISE["dataset"][1]


def test_sft_on_the_worst_samples_lowers_reward(tmp_path):
    manifest = worst_samples_manifest(tmp_path)
    _, evals = run(RECIPE, tmp_path / "run", *budget(), f"data.image_manifest={manifest}")
    assert -gain(evals, "eval_reward_toy_shape_mean") >= FALL


@pytest.mark.slow
def test_best_of_n_raises_held_out_reward_and_judge(tmp_path):
    _, evals = run(BEST_OF_N, tmp_path, *budget())
    assert gain(evals, "eval_reward_toy_shape_mean") >= RISE["best_of_n"][0]
    assert gain(evals, "gold_mean") >= RISE["best_of_n"][1]


@pytest.mark.slow
def test_worst_of_n_lowers_reward(tmp_path):
    _, evals = run(BEST_OF_N, tmp_path, *budget(), "reward.components.toy_shape=-1.0")
    assert -gain(evals, "eval_reward_toy_shape_mean") >= FALL
