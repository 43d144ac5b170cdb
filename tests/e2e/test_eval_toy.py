"""The CPU demo: `genalign eval` of the shipped base and of a trained run's checkpoint on the toy
benchmark gives exactly the numbers the run's own evaluation logged (step 0 is the base, the
last step the checkpoint), so the gain it shows is the run's; `--benchmark run` repeats the
run's whole evaluation row (reward, gold, every quality measure). Same computation in the same
order on one machine: compared exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import read_rows

from genalign.cli import main

STEPS = 2


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy_eval") / "run"
    assert (
        main(
            [
                "train",
                f"trainer.output_dir={out}",
                f"trainer.num_steps={STEPS}",
                f"eval.every={STEPS}",
                "trainer.progress_bar=false",
            ]
        )
        == 0
    )
    return out


def table(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())["table"]["scorers"]


def test_toy_benchmark_of_base_and_trained_shows_the_runs_own_gain(toy_run, tmp_path):
    rows = read_rows(toy_run / "eval_metrics.csv")
    assert [row["step"] for row in rows] == ["0", str(STEPS)]
    assert main(["eval", "--model", "base", "--benchmark", "toy", "--output-dir", str(tmp_path / "base")]) == 0
    assert (
        main(
            [
                "eval",
                "--model",
                str(toy_run / "checkpoint-final"),
                "--benchmark",
                "toy",
                "--output-dir",
                str(tmp_path / "trained"),
            ]
        )
        == 0
    )
    for name, row in (("base", rows[0]), ("trained", rows[-1])):
        scorers = table(tmp_path / name)
        assert scorers["eval_reward"]["mean"] == float(row["eval_reward_mean"])
        assert scorers["gold"]["mean"] == float(row["gold_mean"])
    gain = table(tmp_path / "trained")["eval_reward"]["mean"] - table(tmp_path / "base")["eval_reward"]["mean"]
    assert gain == float(rows[-1]["eval_reward_mean"]) - float(rows[0]["eval_reward_mean"])


def test_the_runs_own_evaluation_through_genalign_eval_agrees_with_eval_metrics(toy_run, tmp_path):
    assert (
        main(
            [
                "eval",
                "--model",
                str(toy_run / "checkpoint-final"),
                "--benchmark",
                "run",
                "--output-dir",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    last = read_rows(toy_run / "eval_metrics.csv")[-1]
    scorers = table(tmp_path / "run")
    assert scorers["eval_reward"]["mean"] == float(last["eval_reward_mean"])
    assert scorers["gold"]["mean"] == float(last["gold_mean"])
    for measure in ("toy_off_shape_fraction", "toy_background_deviation", "toy_shape_area", "toy_patch_pattern"):
        assert scorers[f"quality_{measure}"]["mean"] == float(last[f"quality_{measure}_mean"])
