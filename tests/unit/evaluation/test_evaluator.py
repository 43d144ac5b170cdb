import csv

import torch

from genalign.data.prompts import PromptExample
from genalign.evaluation.config import EvalConfig
from genalign.evaluation.evaluator import Evaluator
from genalign.rewards.scores import RewardScores
from genalign.rollout.collector import SamplingSpec
from genalign.tracking.sinks import CSVSink


class ScriptedRuntime:
    """Returns the next scripted mean for every call (a stand-in reward runtime)."""

    def __init__(self, name, means):
        self.name, self.means, self.calls = name, list(means), 0

    def score(self, images, prompts, metadata):
        value = self.means[min(self.calls, len(self.means) - 1)]
        self.calls += 1
        return RewardScores(components={self.name: torch.full((len(prompts),), value)}, weights={self.name: 1.0})


def build(tmp_path, reward_means, gold_means, **cfg):
    examples = [PromptExample(prompt=f"prompt {i}", prompt_id=i, source=f"x:{i + 1}") for i in range(5)]
    spec = SamplingSpec(height=4, width=4, num_steps=3, guidance_scale=1.0, noise_level=0.0, chunk_size=2)
    return Evaluator(
        EvalConfig(max_prompts=3, divergence_window=3, **cfg),
        examples,
        spec,
        ScriptedRuntime("train", reward_means),
        ScriptedRuntime("judge", gold_means),
        tmp_path,
        CSVSink(tmp_path / "eval_metrics.csv"),
    )


def test_evaluation_is_deterministic_and_writes_sheet_and_row(linear_policy, tmp_path):
    evaluator = build(tmp_path, [0.1], [0.5])
    from genalign.rollout.collector import generate

    first = generate(linear_policy, evaluator.groups, evaluator.spec)
    second = generate(linear_policy, evaluator.groups, evaluator.spec)
    assert torch.equal(first.images, second.images)  # fixed prompts and seeds
    assert len(first) == 3
    evaluator.evaluate(linear_policy, step=0)
    evaluator.sink.close()
    assert (tmp_path / "eval_epoch_0" / "contact_sheet.png").exists()
    rows = list(csv.DictReader(open(tmp_path / "eval_metrics.csv")))
    assert rows[0]["step"] == "0" and "gold_mean" in rows[0] and rows[0]["gold_divergence"] in ("0.0", "0")


def test_monitor_flags_reward_up_while_gold_flat(linear_policy, tmp_path):
    evaluator = build(tmp_path, [0.1, 0.4, 0.8], [0.5, 0.5, 0.49])
    flags = [evaluator.evaluate(linear_policy, step)["gold_divergence"] for step in (0, 10, 20)]
    assert flags == [0.0, 0.0, 1.0]


def test_monitor_quiet_when_gold_rises_with_reward(linear_policy, tmp_path):
    evaluator = build(tmp_path, [0.1, 0.4, 0.8], [0.3, 0.5, 0.7])
    flags = [evaluator.evaluate(linear_policy, step)["gold_divergence"] for step in (0, 10, 20)]
    assert flags == [0.0, 0.0, 0.0]


class TwoMeasures:
    """A quality runtime with two components whose sum would be meaningless."""

    def score(self, images, prompts, metadata):
        n = len(prompts)
        return RewardScores(
            components={"a": torch.full((n,), 0.25), "b": torch.full((n,), 7.0)}, weights={"a": 1.0, "b": 1.0}
        )


def test_quality_measures_are_logged_each_on_its_own(linear_policy, tmp_path):
    examples = [PromptExample(prompt=f"prompt {i}", prompt_id=i, source=f"x:{i + 1}") for i in range(2)]
    spec = SamplingSpec(height=4, width=4, num_steps=2, guidance_scale=1.0, noise_level=0.0, chunk_size=2)
    evaluator = Evaluator(
        EvalConfig(max_prompts=2),
        examples,
        spec,
        ScriptedRuntime("train", [0.1]),
        None,
        tmp_path,
        CSVSink(tmp_path / "eval_metrics.csv"),
        quality_runtime=TwoMeasures(),
    )
    metrics = evaluator.evaluate(linear_policy, step=0)
    assert metrics["quality_a_mean"] == 0.25 and metrics["quality_b_mean"] == 7.0
    assert "quality_mean" not in metrics and "gold_divergence" not in metrics
