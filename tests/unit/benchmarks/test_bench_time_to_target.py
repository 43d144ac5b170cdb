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
    ratios = bench.speedups([a, b, c], "grpo", 30)
    assert ratios == {"grpo": [1.0], "fast": [5.0], "never": [None]}


def test_cpu_clock_sums_the_logged_cpu_seconds(tmp_path):
    run = write_run(tmp_path / "run", 10.0, {0: 0.4, 10: 0.6, 20: 0.71}, {0: 0.5, 10: 0.5, 20: 0.6})
    wall = bench.time_to_target("grpo", 42, run, ceiling=1.0, fraction=0.5, clock="wall")
    cpu = bench.time_to_target("grpo", 42, run, ceiling=1.0, fraction=0.5, clock="cpu")
    assert wall.target_seconds == pytest.approx(200.0) and cpu.target_seconds == pytest.approx(50.0)
    assert cpu.seconds_per_step == pytest.approx(2.5) and cpu.target_step == wall.target_step == 20
