"""Learning tests of DiffusionNFT and Flow-DPO on the CPU demo (slow; fixed seed 42).

Each runs a toy recipe through the CLI for BUDGET_STEPS training steps and compares the
held-out evaluation (8 held-out-colour prompts x 16 samples, Euler ODE) at step 0 and at
the end: the `toy_shape` reward and the independent judge (`gold_mean`) must rise by the
stated margin, and the same run with the reward negated (online) or the pairs swapped
(offline) must make the shape reward fall. Budget: 20 steps, about 2-3 minutes per run on
the 2-core box when it is quiet. Measured there (seed 42, step 0 -> 20; 0.465/0.465 at step 0):
  nft         held-out reward 0.614 (+0.149), judge 0.557 (+0.092)
  dpo online  held-out reward 0.525 (+0.060), judge 0.563 (+0.098)
  negated:    nft 0.347 (-0.118), dpo online 0.413 (-0.053)
Margins sit below these measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import train_recipe as run

# `calibration`: the margins below were measured on the 16x16 demo base (or, for some variants,
# not yet measured); the demo is now 32x32 with another base model, so until they are measured
# again these run on request (`pytest -m calibration`), not in CI's slow pass.
pytestmark = [pytest.mark.slow, pytest.mark.calibration]

BUDGET_STEPS = 20
COMMON = (f"trainer.num_steps={BUDGET_STEPS}", f"eval.every={BUDGET_STEPS}", "algorithm.timestep_fraction=0.3")
NFT = ("experiment/toy/shapes_nft", "actor.lr=2e-4", *COMMON)
DPO_ONLINE = ("experiment/toy/shapes_dpo", "actor.lr=1e-4", *COMMON)
DPO_OFFLINE = ("experiment/toy/offline_dpo", "actor.lr=1e-4", *COMMON)
RISE = {"nft": (0.08, 0.05), "dpo_online": (0.03, 0.05), "dpo_offline": (0.03, 0.03)}
"""Minimum rise of the held-out toy_shape reward and of the judge over the budget."""
FALL = 0.03
"""Minimum fall of the held-out toy_shape reward under the negated control."""


def gain(evals: list[dict], key: str) -> float:
    assert evals[0]["step"] == 0 and evals[-1]["step"] == BUDGET_STEPS
    return evals[-1][key] - evals[0][key]


@pytest.mark.parametrize("name,recipe", [("nft", NFT), ("dpo_online", DPO_ONLINE)], ids=["nft", "dpo_online"])
def test_online_algorithm_raises_held_out_reward_and_judge(name, recipe, tmp_path):
    _, evals = run(recipe[0], tmp_path, *recipe[1:])
    assert gain(evals, "eval_reward_toy_shape_mean") >= RISE[name][0]
    assert gain(evals, "gold_mean") >= RISE[name][1]


@pytest.mark.parametrize("recipe", [NFT, DPO_ONLINE], ids=["nft", "dpo_online"])
def test_online_algorithm_with_negated_reward_lowers_it(recipe, tmp_path):
    _, evals = run(recipe[0], tmp_path, *recipe[1:], "reward.components.toy_shape=-1.0")
    assert -gain(evals, "eval_reward_toy_shape_mean") >= FALL


@pytest.mark.xfail(strict=True, reason="not learning yet on the toy set within 20 steps: measured held-out reward "
                   "0.465 -> 0.477 / judge 0.472 at lr 1e-4 (0.319 at step 10), 0.412 / 0.452 at lr 3e-4; "
                   "the dataset or beta needs work")
def test_offline_dpo_raises_held_out_reward_and_judge(tmp_path):
    _, evals = run(DPO_OFFLINE[0], tmp_path, *DPO_OFFLINE[1:])
    assert gain(evals, "eval_reward_toy_shape_mean") >= RISE["dpo_offline"][0]
    assert gain(evals, "gold_mean") >= RISE["dpo_offline"][1]


def test_offline_dpo_on_swapped_pairs_lowers_reward(tmp_path):
    """The offline control: the same pairs with chosen and rejected exchanged."""
    source = Path(__file__).resolve().parents[2] / "datasets" / "toy" / "preferences"
    swapped = tmp_path / "swapped.jsonl"
    with (source / "pairs.jsonl").open() as rows, swapped.open("w") as out:
        for line in rows:
            row = json.loads(line)
            row["chosen"], row["rejected"] = str(source / row["rejected"]), str(source / row["chosen"])
            out.write(json.dumps(row) + "\n")
    _, evals = run(DPO_OFFLINE[0], tmp_path / "run", *DPO_OFFLINE[1:], f"data.preference_manifest={swapped}")
    assert -gain(evals, "eval_reward_toy_shape_mean") >= FALL
