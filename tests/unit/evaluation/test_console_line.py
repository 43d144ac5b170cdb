"""The evaluation's console line: headline figures, under 160 characters, the rest in the CSV."""

from genalign.evaluation.console import MAX_CHARS, eval_line


def test_the_demo_evaluation_is_one_short_line():
    metrics = {
        "eval_reward_mean": 0.671,
        "eval_reward_std": 0.2,
        "eval_reward_se": 0.012,
        "eval_reward_toy_shape_mean": 0.671,
        "gold_mean": 0.682,
        "gold_toy_shape_judge_mean": 0.682,
        "gold_divergence": 0.0,
        "quality_toy_off_shape_fraction_mean": 0.0,
        "quality_toy_background_deviation_mean": 6.2,
        "quality_toy_shape_area_mean": 0.373,
    }
    assert eval_line(20, metrics) == (
        "eval step 20: reward 0.6710 ± 0.0120, gold 0.6820 (all figures: eval_metrics.csv)"
    )


def test_several_components_are_listed_while_they_fit():
    metrics = {
        "eval_reward_mean": 0.5,
        "eval_reward_se": 0.01,
        "gold_divergence": 1.0,
        "gold_mean": 0.2,
        **{f"eval_reward_component_number_{i}_mean": i / 10 for i in range(12)},
    }
    line = eval_line(40, metrics)
    assert len(line) <= MAX_CHARS and "reward and gold diverge" in line
    assert "[component_number_0 0.0000, " in line and line.endswith(", ...] (all figures: eval_metrics.csv)")
    two = eval_line(
        40, {"eval_reward_mean": 0.5, "eval_reward_ocr_mean": 0.75, "eval_reward_jpeg_compressibility_mean": 0.25}
    )
    assert (
        two == "eval step 40: reward 0.5000 [ocr 0.7500, jpeg_compressibility 0.2500] (all figures: eval_metrics.csv)"
    )
