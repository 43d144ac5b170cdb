"""benchmarks/bench_overlap.py: a run's figures and the per-seed speed-up report, on hand-made run dirs."""

import importlib.util
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_overlap.py"
spec = importlib.util.spec_from_file_location("bench_overlap", PATH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up while the class is built
spec.loader.exec_module(bench)


def write_run(directory: Path, step_seconds: list[float], judge: tuple[float, float]) -> Path:
    directory.mkdir()
    rows = ["step,time_rollout_s,time_step_s"] + [f"{i + 1},0.5,{s}" for i, s in enumerate(step_seconds)]
    (directory / "metrics.csv").write_text("\n".join(rows) + "\n")
    evals = ["step,eval_reward_mean,gold_mean", f"0,0.4,{judge[0]}", f"2,0.6,{judge[1]}"]
    (directory / "eval_metrics.csv").write_text("\n".join(evals) + "\n")
    return directory


def test_figures_sum_the_step_seconds_and_read_reward_and_judge(tmp_path):
    figures = bench.figures(write_run(tmp_path / "off", [2.0, 3.0], (0.45, 0.70)), "off", 42)
    assert figures.step_seconds == 5.0 and figures.reward == (0.4, 0.6) and figures.judge == (0.45, 0.70)


def test_report_gives_each_seeds_speed_up_beside_both_judge_gains(tmp_path):
    results = [
        bench.figures(write_run(tmp_path / "a", [3.0, 3.0], (0.4, 0.7)), "off", 42),
        bench.figures(write_run(tmp_path / "b", [2.0, 2.0], (0.4, 0.6)), "one_step", 42),
        bench.figures(write_run(tmp_path / "c", [4.0], (0.4, 0.5)), "off", 43),  # no pair: no speed-up line
    ]
    text = bench.report(results)
    assert "seed 42: one_step 1.50x faster at equal samples; judge gain +0.200 (off +0.300)" in text
    assert "seed 43:" not in text and "median speed-up over 1 seed(s): 1.50x" in text
