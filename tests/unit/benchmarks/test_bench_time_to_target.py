"""benchmarks/bench_time_to_target.py: target, time-to-target, the equal learning-rate sweep,
speed-ups with their bounds and intervals, and the protocol checks, on hand-made run dirs."""

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_time_to_target.py"
spec = importlib.util.spec_from_file_location("bench_time_to_target", PATH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up while the class is built
spec.loader.exec_module(bench)


def write_run(
    directory: Path,
    step_seconds: float,
    eval_rewards: dict[int, float],
    judge: dict[int, float],
    pattern: dict[int, float] | None = None,
) -> Path:
    directory.mkdir()
    steps = max(eval_rewards)
    lines = ["step,time_rollout_s,time_reward_s,time_train_s,time_cpu_s"] + [
        f"{s},{step_seconds / 2},0,{step_seconds / 2},{step_seconds / 4}" for s in range(1, steps + 1)
    ]
    (directory / "metrics.csv").write_text("\n".join(lines) + "\n")
    extra = f",{bench.PATTERN}" if pattern else ""
    rows = [f"step,eval_reward_mean,gold_mean{extra}"] + [
        f"{s},{r},{judge[s]}" + (f",{pattern[s]}" if pattern else "") for s, r in eval_rewards.items()
    ]
    (directory / "eval_metrics.csv").write_text("\n".join(rows) + "\n")
    return directory


def result(
    name: str, seconds: float | None, total: float = 100.0, seed: int = 42, lr: float = 1e-3, final: float = 0.8
) -> "bench.RunResult":
    return bench.RunResult(name, lr, seed, 0.4, 10 if seconds else None, seconds, total, 1.0, final, None, None)


def test_time_to_target_on_the_cpu_and_wall_clocks(tmp_path):
    slow = write_run(
        tmp_path / "slow",
        10.0,
        {0: 0.4, 2: 0.6, 4: 0.71, 6: 0.8},
        {0: 0.5, 2: 0.5, 4: 0.6, 6: 0.6},
        {0: 2.0, 2: 2.5, 4: 3.0, 6: 5.5},
    )
    assert bench.base_reward(slow) == pytest.approx(0.4)
    target = bench.target_from(0.4, ceiling=1.0, fraction=0.5)
    assert target == pytest.approx(0.7)
    wall = bench.time_to_target("grpo", 1e-3, 42, slow, target, clock="wall")
    cpu = bench.time_to_target("grpo", 1e-3, 42, slow, target, clock="cpu")
    assert wall.target_step == cpu.target_step == 4
    assert wall.target_seconds == pytest.approx(40.0) and cpu.target_seconds == pytest.approx(10.0)
    assert cpu.seconds_per_step == pytest.approx(2.5) and wall.total_seconds == pytest.approx(60.0)
    assert wall.judge_delta_at_target == pytest.approx(0.1) and wall.pattern_delta_final == pytest.approx(3.5)
    never = write_run(tmp_path / "never", 1.0, {0: 0.4, 2: 0.5, 4: 0.69}, {0: 0.5, 2: 0.5, 4: 0.5})
    missed = bench.time_to_target("x", 1e-3, 42, never, target)
    assert missed.target_step is None and missed.target_seconds is None and missed.pattern_delta_final is None


def test_one_absolute_target_for_every_run(tmp_path):
    """A recipe that starts higher (CFG in its evaluation) is held to the same reward, not to its
    own base plus half its own gap."""
    cfg = write_run(tmp_path / "cfg", 4.0, {0: 0.6, 2: 0.69, 4: 0.75}, {0: 0.6, 2: 0.6, 4: 0.7})
    run = bench.time_to_target("cfg", 1e-3, 42, cfg, target=0.7)
    assert run.base == pytest.approx(0.6) and run.target_step == 4


def test_a_budget_reads_a_longer_run_only_up_to_it(tmp_path):
    run = write_run(tmp_path / "run", 10.0, {0: 0.4, 10: 0.6, 20: 0.71, 30: 0.8}, {0: 0.5, 10: 0.5, 20: 0.6, 30: 0.6})
    (run / "checkpoint-final").mkdir()
    assert bench.finished_steps(run) == 30 and bench.finished_steps(tmp_path) is None
    short = bench.time_to_target("grpo", 1e-3, 42, run, 0.7, clock="wall", budget=10)
    assert short.target_step is None and short.total_seconds == pytest.approx(100.0)
    assert short.final_reward == pytest.approx(0.6)  # the eval at the budget, not the run's last
    assert bench.time_to_target("grpo", 1e-3, 42, run, 0.7, budget=30).target_step == 20


def test_choose_lr_takes_the_fastest_to_target_else_the_best_reward():
    sweep = [result("a", 50.0, lr=5e-4), result("a", 30.0, lr=1e-3), result("a", None, lr=2e-3, final=0.95)]
    assert bench.choose_lr(sweep) == 1e-3  # a run that reached the target beats a higher final reward
    missed = [
        result("a", None, lr=5e-4, final=0.6),
        result("a", None, lr=1e-3, final=0.65),
        result("a", None, lr=2e-3, final=0.5),
    ]
    assert bench.choose_lr(missed) == 1e-3


def test_speed_up_and_its_bounds():
    base, fast, never = result("grpo", 200.0), result("fast", 40.0), result("never", None, total=30.0)
    assert bench.speedup(base, fast) == bench.Ratio(5.0)
    # the recipe missed: at most the baseline's time over the recipe's whole budget
    assert bench.speedup(base, never) == bench.Ratio(pytest.approx(200.0 / 30.0), "<")
    # the baseline missed: at least its whole budget over the recipe's time
    assert bench.speedup(never, fast) == bench.Ratio(pytest.approx(30.0 / 40.0), ">")
    assert bench.speedup(never, never) is None
    runs = [result("grpo", 20.0, seed=s) for s in (42, 43)] + [
        result("fast", 10.0, seed=43),
        result("fast", 5.0, seed=42),
        result("fast", 1.0, seed=7),
    ]
    assert bench.pair_speedups(runs, "grpo", "fast") == [bench.Ratio(4.0), bench.Ratio(2.0)]  # seeds 42, 43 only


def test_median_over_seeds_keeps_bounds_honest():
    exact, low, high = bench.Ratio(2.0), bench.Ratio(6.0, ">"), bench.Ratio(1.0, "<")
    assert bench.median_ratio([exact, bench.Ratio(4.0), bench.Ratio(3.0)]) == bench.Ratio(3.0)
    # lower bounds only: the median can only rise, so it is a lower bound too
    assert bench.median_ratio([exact, low, bench.Ratio(5.0, ">")]) == bench.Ratio(5.0, ">")
    assert bench.median_ratio([exact, high, high]) == bench.Ratio(1.0, "<")
    assert bench.median_ratio([exact, low, high]) is None  # bounds both ways: undetermined
    assert bench.median_ratio([exact, None, exact]) is None  # a seed where neither run reached it
    assert str(bench.Ratio(5.0, ">")) == ">5.00x" and str(bench.Ratio(1.5)) == "1.50x"
    assert bench.ratio_range([exact, low, high]) == (high, low)
    assert bench.ratio_range([exact, None]) is None


def test_bootstrap_interval_of_the_median():
    values = [1.2, 1.4, 1.5, 1.6, 2.0]
    low, high = bench.bootstrap_median(values)
    assert min(values) <= low <= statistics.median(values) <= high <= max(values)
    assert bench.bootstrap_median(values) == (low, high)  # deterministic
    assert bench.bootstrap_median([1.5] * 5) == (1.5, 1.5)  # no spread, no interval
    # the 90 % interval of the median of 5 values drawn from {1, 2}: both ends reachable
    assert bench.bootstrap_median([1.0, 1.0, 1.0, 2.0, 2.0]) == (1.0, 2.0)


def test_pair_summary_gives_median_range_and_interval_only_without_bounds():
    exact = [bench.Ratio(v) for v in (1.2, 1.4, 1.5, 1.6, 2.0)]
    text = bench.pair_summary(exact)
    assert text.startswith("1.50x [1.20x, 2.00x] (90% CI ") and text.endswith("x)")
    bounded = exact[:4] + [bench.Ratio(3.0, ">")]
    assert bench.pair_summary(bounded) == ">1.50x [1.20x, >3.00x]"  # a lower bound: no interval
    assert bench.pair_summary(exact[:4] + [None]) == "-"


def test_table_headlines_the_first_pair(tmp_path, capsys):
    runs = []
    for seed, (slow_s, fast_s) in zip((42, 43, 44), ((10.0, 4.0), (10.0, 5.0), (10.0, 8.0))):
        slow = write_run(tmp_path / f"slow{seed}", slow_s, {0: 0.4, 10: 0.6, 20: 0.71}, {0: 0.5, 10: 0.5, 20: 0.6})
        fast = write_run(tmp_path / f"fast{seed}", fast_s, {0: 0.4, 10: 0.72, 20: 0.8}, {0: 0.5, 10: 0.55, 20: 0.6})
        runs += [
            bench.time_to_target("grpo", 1e-3, seed, slow, 0.7, "wall"),
            bench.time_to_target("nft", 2e-3, seed, fast, 0.7, "wall"),
        ]
    bench.print_tables(runs[:2], runs, [("grpo", "nft"), ("nft", "grpo")], 0.7, "wall")
    out = capsys.readouterr().out
    # per seed 200 s over 40 / 50 / 80 s
    assert "headline: nft over grpo: 4.00x [2.50x, 5.00x]" in out and "per seed 5.00x, 4.00x, 2.50x" in out
    assert "pair 2: grpo over nft: 0.25x [0.20x, 0.40x]" in out
    assert "tuning (seed 42): grpo lr 0.001: step 20" in out


def test_protocol_checks():
    with pytest.raises(SystemExit):
        bench.parse_args(["--pair", "a=b", "--tune-seed", "42", "--seeds", "42", "43"])  # tuning seed in the headline
    args = bench.parse_args(["--pair", "a=b", "x", "y=1"])
    assert args.seeds == [42, 43, 44, 45, 46] and args.tune_seed == 41 and args.eval_every == 2
    assert args.lrs == [5e-4, 1e-3, 2e-3] and args.overrides == ["x", "y=1"]
    assert bench.parse_pairs(["a/b=c/d", "e=f"]) == [("a/b", "c/d"), ("e", "f")]
    for bad in (["a"], ["=b"], ["a="], ["a=b=c"]):
        with pytest.raises(SystemExit, match="BASELINE=RECIPE"):
            bench.parse_pairs(bad)
    assert bench.parse_budgets(["a/b=120"], ["a/b", "c"]) == {"a/b": 120}
    for bad in (["x=5"], ["a/b"], ["a/b=0"], ["a/b=ten"]):
        with pytest.raises(SystemExit, match="RECIPE=STEPS"):
            bench.parse_budgets(bad, ["a/b", "c"])
    assert bench.run_dir(Path("/o"), "experiment/toy/x", 1e-3, 42) == Path("/o/experiment_toy_x_lr0.001_seed42")


def test_measured_runs_stop_at_the_first_chunk_end_past_the_target(tmp_path, monkeypatch):
    assert bench.chunk_ends(40, 10) == [10, 20, 30, 40] and bench.chunk_ends(35, 10) == [10, 20, 30, 35]
    assert bench.chunk_ends(40, 0) == [40]
    rewards = {0: 0.4, 10: 0.6, 20: 0.75, 30: 0.8, 40: 0.9}
    trained = []

    def fake_train(recipe, lr, seed, out, steps, args):  # writes the evals up to `steps`, like a resumed run
        trained.append(steps)
        rows = ["step,eval_reward_mean"] + [f"{s},{r}" for s, r in rewards.items() if s <= steps]
        out.mkdir(exist_ok=True)
        (out / "eval_metrics.csv").write_text("\n".join(rows) + "\n")

    monkeypatch.setattr(bench, "train", fake_train)
    args = bench.parse_args(["--pair", "a=b"])
    bench.train_to_target("a", 1e-3, 42, tmp_path / "run", 40, 0.7, args)
    assert trained == [10, 20] and bench.reached_target(tmp_path / "run", 0.7)
    trained.clear()
    bench.train_to_target("a", 1e-3, 42, tmp_path / "miss", 40, 0.95, args)  # never reached: the whole budget
    assert trained == [10, 20, 30, 40] and not bench.reached_target(tmp_path / "miss", 0.95)
    trained.clear()
    bench.train_to_target("a", 1e-3, 41, tmp_path / "tune", 30, None, args)  # tuning: no target, whole budget
    assert trained == [30]


def test_report_only_reads_finished_runs_and_trains_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "train", lambda *a: pytest.fail("--report-only must not train"))

    def finished(path: Path, seconds: float, rewards: dict[int, float]) -> None:
        path.parent.mkdir(exist_ok=True)
        write_run(path, seconds, rewards, {s: 0.5 for s in rewards})
        (path / "checkpoint-final").mkdir()

    for lr, reward in ((5e-4, 0.6), (1e-3, 0.75)):
        finished(bench.run_dir(tmp_path / "tune", "a", lr, 41), 2.0, {0: 0.4, 10: reward})
        finished(bench.run_dir(tmp_path / "tune", "b", lr, 41), 1.0, {0: 0.4, 10: reward - 0.1})
    finished(bench.run_dir(tmp_path, "a", 1e-3, 42), 2.0, {0: 0.4, 10: 0.8})  # reached: complete
    finished(bench.run_dir(tmp_path, "b", 1e-3, 42), 1.0, {0: 0.4, 10: 0.8})
    finished(bench.run_dir(tmp_path, "a", 1e-3, 43), 2.0, {0: 0.4, 10: 0.6})  # missed, budget 20 not trained
    assert bench.complete(bench.run_dir(tmp_path, "a", 1e-3, 42), 20, 0.7)
    assert not bench.complete(bench.run_dir(tmp_path, "a", 1e-3, 43), 20, 0.7)
    assert not bench.complete(tmp_path / "absent", 20, 0.7)
    bench.main(
        [
            "--pair",
            "a=b",
            "--lrs",
            "5e-4",
            "1e-3",
            "--seeds",
            "42",
            "43",
            "--steps",
            "20",
            "--eval-every",
            "10",
            "--tune-steps",
            "10",
            "--out",
            str(tmp_path),
            "--report-only",
            "--clock",
            "wall",
        ]
    )
    out = capsys.readouterr().out
    # target 0.7: a's 1e-3 run reached it, none of b's did, so b keeps its best final reward (1e-3, 0.65)
    assert "chosen learning rates (tuning seed 41): a 0.001, b 0.001" in out
    # seed 43 is left out (a's run neither reached the target nor trained its budget; b has none)
    assert "headline: b over a: 2.00x [2.00x, 2.00x] (90% CI 2.00-2.00x); per seed 2.00x" in out
