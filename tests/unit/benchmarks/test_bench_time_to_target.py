"""benchmarks/bench_time_to_target.py: target, time-to-target and speed-up on hand-made run dirs."""

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_time_to_target.py"
spec = importlib.util.spec_from_file_location("bench_time_to_target", PATH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up while the class is built
spec.loader.exec_module(bench)


def write_run(directory: Path, step_seconds: float, eval_rewards: dict[int, float], judge: dict[int, float]) -> Path:
    directory.mkdir()
    steps = max(eval_rewards)
    lines = ["step,time_rollout_s,time_reward_s,time_train_s,time_cpu_s"] + [
        f"{s},{step_seconds / 2},0,{step_seconds / 2},{step_seconds / 4}" for s in range(1, steps + 1)]
    (directory / "metrics.csv").write_text("\n".join(lines) + "\n")
    rows = ["step,eval_reward_mean,gold_mean"] + [f"{s},{r},{judge[s]}" for s, r in eval_rewards.items()]
    (directory / "eval_metrics.csv").write_text("\n".join(rows) + "\n")
    return directory


def test_time_to_target_and_speed_up(tmp_path):
    # base 0.4, ceiling 1.0, fraction 0.5 -> target 0.7
    slow = write_run(tmp_path / "slow", 10.0, {0: 0.4, 10: 0.6, 20: 0.71, 30: 0.8}, {0: 0.5, 10: 0.5, 20: 0.6, 30: 0.6})
    fast = write_run(tmp_path / "fast", 4.0, {0: 0.4, 10: 0.72, 20: 0.8, 30: 0.85}, {0: 0.5, 10: 0.45, 20: 0.5, 30: 0.55})
    never = write_run(tmp_path / "never", 1.0, {0: 0.4, 10: 0.5, 20: 0.6, 30: 0.69}, {0: 0.5, 10: 0.5, 20: 0.5, 30: 0.5})
    a = bench.time_to_target("grpo", 42, slow, ceiling=1.0, fraction=0.5)
    b = bench.time_to_target("fast", 42, fast, ceiling=1.0, fraction=0.5)
    c = bench.time_to_target("never", 42, never, ceiling=1.0, fraction=0.5)
    assert a.target == pytest.approx(0.7) and a.target_step == 20 and a.target_seconds == pytest.approx(200.0)
    assert b.target_step == 10 and b.target_seconds == pytest.approx(40.0)
    assert b.judge_delta_at_target == pytest.approx(-0.05) and b.judge_delta_final == pytest.approx(0.05)
    assert c.target_step is None and c.target_seconds is None
    ratios = bench.speedups([a, b, c], "grpo")
    assert ratios["grpo"] == [bench.Ratio(1.0)] and ratios["fast"] == [bench.Ratio(5.0)]
    # "never" missed the target in its 30 steps (30 s): at most grpo's 200 s over those 30 s
    assert ratios["never"] == [bench.Ratio(pytest.approx(200.0 / 30.0), "<")]
    # a baseline that missed gives the recipe a lower bound: never's whole 30 s over fast's 40 s
    assert bench.speedups([c, b], "never")["fast"] == [bench.Ratio(pytest.approx(30.0 / 40.0), ">")]


def test_median_over_seeds_keeps_bounds_honest():
    exact, low, high = bench.Ratio(2.0), bench.Ratio(6.0, ">"), bench.Ratio(1.0, "<")
    assert bench.median_ratio([exact, bench.Ratio(4.0), bench.Ratio(3.0)]) == bench.Ratio(3.0)
    # lower bounds only: the median can only rise, so it is a lower bound too
    assert bench.median_ratio([exact, low, bench.Ratio(5.0, ">")]) == bench.Ratio(5.0, ">")
    assert bench.median_ratio([exact, high, high]) == bench.Ratio(1.0, "<")
    assert bench.median_ratio([exact, low, high]) is None  # bounds both ways: undetermined
    assert bench.median_ratio([exact, None, exact]) is None  # a seed where neither run reached it
    assert str(bench.Ratio(5.0, ">")) == ">5.00x" and str(bench.Ratio(1.5)) == "1.50x"


def test_table_prints_a_speed_up_column_per_baseline(tmp_path, capsys):
    slow = write_run(tmp_path / "slow", 10.0, {0: 0.4, 10: 0.6, 20: 0.71}, {0: 0.5, 10: 0.5, 20: 0.6})
    fast = write_run(tmp_path / "fast", 4.0, {0: 0.4, 10: 0.72, 20: 0.8}, {0: 0.5, 10: 0.55, 20: 0.6})
    runs = [bench.time_to_target(name, 42, path, 1.0, 0.5) for name, path in (("grpo", slow), ("fast", fast))]
    bench.print_table(runs, ["grpo", "fast"], {"grpo": 20, "fast": 20})
    out = capsys.readouterr().out
    assert "speed-up 1: over grpo" in out and "speed-up 2: over fast" in out
    row = next(line for line in out.splitlines() if line.startswith("fast "))
    assert "5.00x" in row and "1.00x" in row  # 200 s / 40 s over grpo, itself over fast


def test_cpu_clock_sums_the_logged_cpu_seconds(tmp_path):
    run = write_run(tmp_path / "run", 10.0, {0: 0.4, 10: 0.6, 20: 0.71}, {0: 0.5, 10: 0.5, 20: 0.6})
    wall = bench.time_to_target("grpo", 42, run, ceiling=1.0, fraction=0.5, clock="wall")
    cpu = bench.time_to_target("grpo", 42, run, ceiling=1.0, fraction=0.5, clock="cpu")
    assert wall.target_seconds == pytest.approx(200.0) and cpu.target_seconds == pytest.approx(50.0)
    assert cpu.seconds_per_step == pytest.approx(2.5) and cpu.target_step == wall.target_step == 20


def test_a_budget_reads_a_longer_run_only_up_to_it(tmp_path):
    run = write_run(tmp_path / "run", 10.0, {0: 0.4, 10: 0.6, 20: 0.71, 30: 0.8}, {0: 0.5, 10: 0.5, 20: 0.6, 30: 0.6})
    (run / "checkpoint-final").mkdir()
    assert bench.finished_steps(run) == 30 and bench.finished_steps(tmp_path) is None
    short = bench.time_to_target("grpo", 42, run, ceiling=1.0, fraction=0.5, budget=10)
    assert short.target_step is None and short.total_seconds == pytest.approx(100.0)
    assert short.final_reward == pytest.approx(0.6)  # the eval at the budget, not the run's last
    assert bench.time_to_target("grpo", 42, run, 1.0, 0.5, budget=30).target_step == 20


def test_per_recipe_budgets_name_a_recipe_of_the_run():
    assert bench.parse_budgets(["a/b=120"], ["a/b", "c"]) == {"a/b": 120}
    for bad in (["x=5"], ["a/b"], ["a/b=0"], ["a/b=ten"]):
        with pytest.raises(SystemExit, match="RECIPE=STEPS"):
            bench.parse_budgets(bad, ["a/b", "c"])
