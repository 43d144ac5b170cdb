"""Time-to-target of RL recipes on the CPU demo, compared in pairs under an equal tuning budget.

    python benchmarks/bench_time_to_target.py \
        --pair experiment/toy/shapes_grpo=experiment/toy/shapes_nft_fast [--pair BASELINE=RECIPE ...] \
        [--lrs 5e-4 1e-3 2e-3] [--tune-seed 41] [--tune-steps 30] [--seeds 42 43 44 45 46] [--steps 40] \
        [--eval-every 2] [--steps-for RECIPE=STEPS ...] [--target 0.727 | --ceiling 1.0 --fraction 0.5] \
        [--threads 1] [--clock cpu|wall] [--chunk 10] [--jobs 1] [--out DIR] [--report-only] [key=value ...]

Protocol, the same for every recipe named in a `--pair`:
1. Tuning: one run per learning rate of `--lrs` (`actor.lr`), `--tune-steps` steps, on
   `--tune-seed` (`trainer.seed`). Each recipe keeps the rate that reached the target in the
   fewest training seconds (none reached it: the highest eval reward at the end). Every recipe
   gets the same sweep, so no recipe is tuned harder than the one it is compared with.
2. Measurement: each recipe at its chosen rate on every seed of `--seeds`, which must not
   contain the tuning seed: the headline never sees the seed the rates were picked on.
3. Evaluation every `--eval-every` steps (the recipe's fixed held-out prompts and seeds), so
   step 0 is the base model's evaluation and the target step is known to that granularity.

Target: `--target`, or base + fraction · (ceiling − base) with `base` the step-0 eval reward of
the first pair's baseline on the tuning seed. One absolute target for every run, so a recipe
that evaluates with CFG (and so starts higher) is held to the same image quality as one
without.

Time-to-target is the training time — per `--clock`, the logged CPU seconds of the training
process (`time_cpu_s`; with `--threads 1` it does not grow when other work shares the machine)
or the wall-clock rollout + reward + train seconds — of steps 1..s, evaluation excluded, at
the first evaluated step s whose eval reward reaches the target. A pair's speed-up on one seed
is the baseline's time over the recipe's; the table gives the median over seeds, the lowest and
highest seed, and a 90 % percentile-bootstrap interval of the median. Where one run of a pair
missed the target in its budget the speed-up is a bound ("<": the recipe missed, ">": the
baseline missed) and no bootstrap interval is given. `--steps-for` gives one recipe a longer
budget (a finished shorter run is continued: a resume is bitwise the same as one long run, and
a longer run is read only up to the budget). Measured runs train `--chunk` steps at a time and
stop at the first chunk end at or after their target step (what a run does later cannot change
its time-to-target), so "reward@end" is the eval reward where the run stopped; a run that
misses trains its whole budget. Extra arguments are dotlist overrides applied to every run.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PATTERN = "quality_toy_patch_pattern_mean"
"""eval_metrics.csv column of the demo's patch-grid checkerboard measure (reported when logged)."""


@dataclass
class RunResult:
    recipe: str
    lr: float
    seed: int
    base: float
    target_step: int | None
    target_seconds: float | None
    total_seconds: float
    seconds_per_step: float
    final_reward: float
    judge_delta_at_target: float | None
    judge_delta_final: float | None
    pattern_delta_final: float | None = None


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def finished_steps(run_dir: Path) -> int | None:
    """The step a finished run of this benchmark stopped at (it has checkpoint-final); None if none."""
    if not (run_dir / "checkpoint-final").is_dir():
        return None
    return max(int(row["step"]) for row in read_csv(run_dir / "metrics.csv"))


def run_dir(out: Path, recipe: str, lr: float, seed: int) -> Path:
    return out / f"{recipe.replace('/', '_')}_lr{lr:g}_seed{seed}"


def train(recipe: str, lr: float, seed: int, out: Path, steps: int, args: argparse.Namespace) -> None:
    """Train `recipe` at `lr` to `steps` in `out`, unless a finished run that long is there. A
    finished shorter run is continued (a resume is bitwise the same as training that long at
    once); a directory without checkpoint-final is an interrupted run and is started over."""
    done = finished_steps(out)
    if done is not None and done >= steps:
        return
    command = [
        sys.executable,
        "-m",
        "genalign",
        "train",
        "--config",
        recipe,
        f"trainer.output_dir={out}",
        f"trainer.seed={seed}",
        f"actor.lr={lr}",
        f"trainer.num_steps={steps}",
        f"eval.every={args.eval_every}",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        "trainer.resume_from=auto" if done is not None else "trainer.overwrite=true",
        *args.overrides,
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1")
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"{recipe} lr {lr:g} seed {seed} failed:\n{completed.stderr[-3000:]}")


CLOCKS = {"wall": ("time_rollout_s", "time_reward_s", "time_train_s"), "cpu": ("time_cpu_s",)}
"""metrics.csv columns whose sum is a step's training seconds, per --clock."""


def base_reward(out: Path) -> float:
    """The step-0 (base model) eval reward of a run directory."""
    return next(float(r["eval_reward_mean"]) for r in read_csv(out / "eval_metrics.csv") if int(r["step"]) == 0)


def target_from(base: float, ceiling: float, fraction: float) -> float:
    """The eval reward that closes `fraction` of the base's gap to `ceiling`."""
    return base + fraction * (ceiling - base)


def time_to_target(
    recipe: str, lr: float, seed: int, out: Path, target: float, clock: str = "cpu", budget: int | None = None
) -> RunResult:
    """Read one finished run directory and find when its eval reward first reached `target`,
    looking at steps up to `budget` only (None: all), so a longer run serves a shorter budget."""
    within = lambda row: budget is None or int(row["step"]) <= budget  # noqa: E731
    rows = [row for row in read_csv(out / "metrics.csv") if within(row)]
    by_step = {int(r["step"]): r for r in read_csv(out / "eval_metrics.csv") if within(r)}
    elapsed, cumulative = {}, 0.0
    for row in rows:  # training seconds up to and including each step
        cumulative += sum(float(row[k]) for k in CLOCKS[clock])
        elapsed[int(row["step"])] = cumulative
    first, last = by_step[0], by_step[max(by_step)]

    def change(step: int, key: str) -> float | None:
        start, value = first.get(key), by_step[step].get(key)
        return float(value) - float(start) if value and start else None

    reached = next((s for s in sorted(by_step) if s > 0 and float(by_step[s]["eval_reward_mean"]) >= target), None)
    return RunResult(
        recipe,
        lr,
        seed,
        float(first["eval_reward_mean"]),
        reached,
        elapsed[reached] if reached else None,
        cumulative,
        cumulative / len(rows),
        float(last["eval_reward_mean"]),
        change(reached, "gold_mean") if reached else None,
        change(max(by_step), "gold_mean"),
        change(max(by_step), PATTERN),
    )


def choose_lr(tuning: list[RunResult]) -> float:
    """The learning rate of the tuning run that reached the target in the fewest seconds; when
    none reached it, the one with the highest eval reward at the end of its budget."""
    reached = [r for r in tuning if r.target_seconds is not None]
    if reached:
        return min(reached, key=lambda r: r.target_seconds).lr
    return max(tuning, key=lambda r: r.final_reward).lr


@dataclass(frozen=True)
class Ratio:
    """A speed-up: `value` exactly (bound ""), or a bound on it when one run missed the target
    in its budget: ">" (the baseline missed: its whole budget over the recipe's time is a lower
    bound) or "<" (the recipe missed: the baseline's time over the recipe's whole budget)."""

    value: float
    bound: str = ""

    def __str__(self) -> str:
        return f"{self.bound}{self.value:.2f}x"


def speedup(baseline: RunResult, recipe: RunResult) -> Ratio | None:
    """Baseline seconds to target over the recipe's, or a bound on it; None when neither reached it."""
    if baseline.target_seconds is not None and recipe.target_seconds is not None:
        return Ratio(baseline.target_seconds / recipe.target_seconds)
    if recipe.target_seconds is not None:
        return Ratio(baseline.total_seconds / recipe.target_seconds, ">")
    if baseline.target_seconds is not None:
        return Ratio(baseline.target_seconds / recipe.total_seconds, "<")
    return None


def median_ratio(ratios: list[Ratio | None]) -> Ratio | None:
    """Median over seeds. The median is monotone in each value, so with lower bounds alone it is
    a lower bound, with upper bounds alone an upper bound; mixed bounds or a seed where neither
    run reached the target leave it undetermined (None)."""
    if not ratios or any(r is None for r in ratios):
        return None
    bounds = {r.bound for r in ratios} - {""}
    if len(bounds) > 1:
        return None
    return Ratio(statistics.median(r.value for r in ratios), bounds.pop() if bounds else "")


def ratio_range(ratios: list[Ratio | None]) -> tuple[Ratio, Ratio] | None:
    """(lowest, highest) seed's speed-up, each with its own bound marker; None when a seed has none."""
    if not ratios or any(r is None for r in ratios):
        return None
    return min(ratios, key=lambda r: r.value), max(ratios, key=lambda r: r.value)


def bootstrap_median(values: list[float], level: float = 0.9, draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median: resample the seeds with replacement `draws`
    times and take the (1 − level)/2 and (1 + level)/2 quantiles of the resampled medians.
    Deterministic under `seed`; with 5 seeds it is coarse (it can only land on observed values
    or midpoints of two), which is why the table also prints the lowest and highest seed."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    low = medians[int((1 - level) / 2 * (draws - 1))]
    high = medians[int(round((1 + level) / 2 * (draws - 1)))]
    return low, high


def pair_speedups(results: list[RunResult], baseline: str, recipe: str) -> list[Ratio | None]:
    """Per seed present for both: the recipe's speed-up over the baseline, in seed order."""
    base = {r.seed: r for r in results if r.recipe == baseline}
    runs = {r.seed: r for r in results if r.recipe == recipe}
    return [speedup(base[s], runs[s]) for s in sorted(base.keys() & runs.keys())]


def pair_summary(ratios: list[Ratio | None]) -> str:
    """'median [lowest, highest] (90% CI lo-hi)' of one pair's per-seed speed-ups."""
    median, spread = median_ratio(ratios), ratio_range(ratios)
    text = f"{median or '-'} [{spread[0]}, {spread[1]}]" if spread else f"{median or '-'}"
    if spread and all(r.bound == "" for r in ratios):
        low, high = bootstrap_median([r.value for r in ratios])
        text += f" (90% CI {low:.2f}-{high:.2f}x)"
    return text


def print_tables(
    tuning: list[RunResult], results: list[RunResult], pairs: list[tuple[str, str]], target: float, clock: str
) -> None:
    """The tuning sweep, one row per recipe (medians over seeds), then one line per pair."""
    unit = "CPU s" if clock == "cpu" else "s"
    print(f"\ntarget eval reward {target:.3f}; times are training {unit} (evaluation excluded)")
    print(
        "tuning (seed {}): ".format(tuning[0].seed if tuning else "-")
        + "; ".join(
            f"{r.recipe} lr {r.lr:g}: "
            + (
                f"step {r.target_step}, {r.target_seconds:.1f} {unit}"
                if r.target_step
                else f"missed ({r.final_reward:.3f} at end)"
            )
            for r in tuning
        )
    )
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    fmt = lambda x, spec, width: format(x, spec) if x is not None else "-".rjust(width)  # noqa: E731
    header = (
        f"{'recipe':40s} {'lr':>7s} {unit + '/step':>10s} {'steps->tgt':>10s} {unit + '->tgt':>11s} "
        f"{'reward@end':>10s} {'judge@tgt':>9s} {'judge@end':>9s} {'grid@end':>8s} reached"
    )
    print(header)
    print("-" * len(header))
    for recipe in dict.fromkeys(r.recipe for r in results):
        runs = [r for r in results if r.recipe == recipe]
        hit = [r for r in runs if r.target_seconds is not None]
        judge_tgt = med([r.judge_delta_at_target for r in hit if r.judge_delta_at_target is not None])
        flag = " JUDGE-DROP" if judge_tgt is not None and judge_tgt < 0 else ""
        print(
            f"{recipe:40s} {runs[0].lr:7g} {med([r.seconds_per_step for r in runs]):10.2f} "
            f"{fmt(med([r.target_step for r in hit]), '10.0f', 10)} "
            f"{fmt(med([r.target_seconds for r in hit]), '11.1f', 11)} {med([r.final_reward for r in runs]):10.3f} "
            f"{fmt(judge_tgt, '+9.3f', 9)} "
            f"{fmt(med([r.judge_delta_final for r in runs if r.judge_delta_final is not None]), '+9.3f', 9)} "
            f"{fmt(med([r.pattern_delta_final for r in runs if r.pattern_delta_final is not None]), '+8.2f', 8)} "
            f"{len(hit)}/{len(runs)}{flag}"
        )
    print(
        "\nspeed-up, median over seeds [lowest, highest seed] (90% bootstrap CI of the median); "
        "'>'/'<': a bound, one run of the pair missed the target in its budget"
    )
    for i, (baseline, recipe) in enumerate(pairs):
        ratios = pair_speedups(results, baseline, recipe)
        print(
            f"{'headline' if i == 0 else 'pair ' + str(i + 1)}: {recipe} over {baseline}: {pair_summary(ratios)}; "
            "per seed " + ", ".join(str(r) if r else "-" for r in ratios)
        )


def parse_pairs(items: list[str]) -> list[tuple[str, str]]:
    """--pair BASELINE=RECIPE items -> [(baseline, recipe)]."""
    pairs = []
    for item in items:
        baseline, _, recipe = item.partition("=")
        if not baseline or not recipe or "=" in recipe:
            raise SystemExit(f"--pair {item!r}: expected BASELINE=RECIPE (two recipe names)")
        pairs.append((baseline, recipe))
    return pairs


def parse_budgets(items: list[str], recipes: list[str]) -> dict[str, int]:
    """--steps-for RECIPE=STEPS items -> {recipe: steps}; a recipe not in the run is an error."""
    budgets = {}
    for item in items:
        recipe, _, steps = item.rpartition("=")
        if recipe not in recipes or not steps.isdigit() or int(steps) < 1:
            raise SystemExit(f"--steps-for {item!r}: expected RECIPE=STEPS with RECIPE one of the --pair recipes")
        budgets[recipe] = int(steps)
    return budgets


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pair",
        action="append",
        required=True,
        metavar="BASELINE=RECIPE",
        help="a comparison (repeatable); the first is the headline",
    )
    parser.add_argument(
        "--lrs",
        nargs="+",
        type=float,
        default=[5e-4, 1e-3, 2e-3],
        help="the learning-rate sweep every recipe gets on the tuning seed",
    )
    parser.add_argument("--tune-seed", type=int, default=41)
    parser.add_argument("--tune-steps", type=int, default=30, help="steps per tuning run")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44, 45, 46])
    parser.add_argument("--steps", type=int, default=40, help="training steps per measured run (the budget)")
    parser.add_argument(
        "--steps-for",
        action="append",
        default=[],
        metavar="RECIPE=STEPS",
        help="another budget for one recipe's measured runs; a finished shorter run is continued",
    )
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--target", type=float, default=None, help="absolute eval-reward target")
    parser.add_argument("--ceiling", type=float, default=1.0, help="the reward's maximum (without --target)")
    parser.add_argument("--fraction", type=float, default=0.5, help="fraction of the gap to close (without --target)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: the training process's CPU seconds; wall: logged phase seconds",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=10,
        help="measured runs train this many steps at a time and stop once the target is reached "
        "(0: always the whole budget; tuning runs always train their whole budget)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: print the tables from the finished runs in --out (a partial measurement)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once (each its own process)")
    parser.add_argument("--out", default=None, help="directory for the runs (default: a temporary one)")
    parser.add_argument("overrides", nargs="*", help="dotlist overrides for every run")
    args = parser.parse_args(argv)
    if args.tune_seed in args.seeds:
        parser.error(
            f"--seeds {args.seeds} contains the tuning seed {args.tune_seed}: the headline must not "
            "include the seed the learning rates were chosen on"
        )
    if args.tune_steps < args.eval_every or args.steps < args.eval_every:
        parser.error("--tune-steps and --steps must be at least --eval-every")
    return args


def reached_target(out: Path, target: float, budget: int | None = None) -> bool:
    """Whether a run directory's eval reward has reached `target` at some step after 0 (up to
    `budget`; None: any step)."""
    return any(
        0 < int(r["step"]) <= (budget or int(r["step"])) and float(r["eval_reward_mean"]) >= target
        for r in read_csv(out / "eval_metrics.csv")
    )


def chunk_ends(budget: int, chunk: int) -> list[int]:
    """The step counts a measured run is trained to in turn: every `chunk` steps up to the
    budget (0: the budget at once)."""
    if chunk <= 0:
        return [budget]
    return [*range(chunk, budget, chunk), budget]


def train_to_target(
    recipe: str, lr: float, seed: int, out: Path, budget: int, target: float | None, args: argparse.Namespace
) -> None:
    """Train in chunks of `args.chunk` steps, continuing (bitwise, by resume) only while the eval
    reward has not reached `target`; None trains the whole budget. What a run does after its
    target step cannot change its time-to-target, so the steps after it are not bought."""
    for steps in chunk_ends(budget, args.chunk if target is not None else 0):
        train(recipe, lr, seed, out, steps, args)
        if target is not None and reached_target(out, target):
            return


def run_all(jobs: list[tuple], args: argparse.Namespace, target: float | None = None) -> None:
    """Train every (recipe, lr, seed, dir, steps) job, `args.jobs` at a time (see train_to_target)."""
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in [
            pool.submit(train_to_target, recipe, lr, seed, out, steps, target, args)
            for recipe, lr, seed, out, steps in jobs
        ]:
            future.result()


def complete(out: Path, budget: int, target: float | None) -> bool:
    """Whether a run directory holds a finished run that trained its budget or reached `target`."""
    done = finished_steps(out) if out.is_dir() else None
    return done is not None and (done >= budget or (target is not None and reached_target(out, target, done)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pairs = parse_pairs(args.pair)
    recipes = list(dict.fromkeys(name for pair in pairs for name in pair))
    budgets = {recipe: args.steps for recipe in recipes} | parse_budgets(args.steps_for, recipes)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_ttt_"))
    tune_jobs = [
        (recipe, lr, args.tune_seed, run_dir(out / "tune", recipe, lr, args.tune_seed), args.tune_steps)
        for recipe in recipes
        for lr in args.lrs
    ]
    if args.report_only:  # the runs already finished; a recipe missing a tuning run is left out
        tune_jobs = [job for job in tune_jobs if complete(job[3], job[4], None)]
    else:
        run_all(tune_jobs, args)
    first = run_dir(out / "tune", pairs[0][0], args.lrs[0], args.tune_seed)
    target = args.target if args.target is not None else target_from(base_reward(first), args.ceiling, args.fraction)
    tuning = [
        time_to_target(recipe, lr, seed, path, target, args.clock, steps) for recipe, lr, seed, path, steps in tune_jobs
    ]
    tuned = [recipe for recipe in recipes if sum(r.recipe == recipe for r in tuning) == len(args.lrs)]
    chosen = {recipe: choose_lr([r for r in tuning if r.recipe == recipe]) for recipe in tuned}
    print(
        "chosen learning rates (tuning seed {}): {}".format(
            args.tune_seed, ", ".join(f"{recipe} {lr:g}" for recipe, lr in chosen.items())
        ),
        flush=True,
    )
    jobs = [
        (recipe, chosen[recipe], seed, run_dir(out, recipe, chosen[recipe], seed), budgets[recipe])
        for seed in args.seeds
        for recipe in tuned
    ]
    if args.report_only:
        jobs = [job for job in jobs if complete(job[3], job[4], target)]
    else:
        run_all(jobs, args, target)
    results = [
        time_to_target(recipe, lr, seed, path, target, args.clock, min(steps, finished_steps(path)))
        for recipe, lr, seed, path, steps in jobs
    ]
    print_tables(tuning, results, pairs, target, args.clock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
