"""Time-to-target of RL recipes on the CPU demo, as a speed-up over Flow-GRPO in the same run.

    python benchmarks/bench_time_to_target.py \
        --recipes experiment/toy/shapes_grpo experiment/toy/shapes_flow_grpo_fast ... \
        [--baseline experiment/toy/shapes_grpo [OTHER ...]] [--seeds 42 43 44] [--steps 100] [--eval-every 10] \
        [--steps-for RECIPE=STEPS ...] [--ceiling 1.0] [--fraction 0.5] [--threads 1] [--clock wall|cpu] \
        [--out DIR] [key=value ...]

Every recipe runs from the same base model with the same seeds (`trainer.seed`), each in its
own process (`python -m genalign train`), with evaluation every `--eval-every` steps on the
recipe's fixed held-out prompts and seeds, so step 0 is the same base evaluation for every
recipe. Target: the held-out eval reward closes `--fraction` of its gap to `--ceiling` (the
reward's maximum: 1.0 for the demo's shape probability):

    target = base + fraction · (ceiling − base)

Time-to-target is the training wall-clock — the sum of the logged rollout, reward and train
seconds of steps 1..s, evaluation excluded — at the first evaluated step s whose eval reward
reaches the target (evaluation granularity: `--eval-every`). `--clock cpu` sums the logged CPU
seconds of the training process instead (`time_cpu_s`): with `--threads 1` and the demo's
in-process rewards that equals the wall-clock on an idle machine, and unlike the wall-clock it
does not grow when other work shares the machine, so runs measured side by side stay
comparable. The speed-up of a recipe is the baseline's time over its time, per seed, then the
median over seeds; with several `--baseline`s the table has a speed-up column for each (e.g. the
demo's Flow-GRPO recipe and Flow-GRPO training the reference's 9 of 10 steps). Where one run of
a pair missed the target in `--steps`, the speed-up is a bound: "<" the baseline's time over
the recipe's whole budget, ">" the baseline's whole budget over the recipe's time. The judge
(gold reward) change from step 0 is printed at the target step and at the end; a recipe that
reaches the target with the judge below its step-0 value is marked. Any recipe name the config
loader knows works, so other algorithms' recipes are compared by name. `--steps-for` gives one
recipe a longer budget (a slow baseline, so that its speed-up is a number rather than a bound);
an existing finished run shorter than its budget is continued, and a longer one is read only up
to the budget. Extra arguments are dotlist overrides applied to every run.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunResult:
    recipe: str
    seed: int
    base: float
    target: float
    target_step: int | None
    target_seconds: float | None
    total_seconds: float
    seconds_per_step: float
    final_reward: float
    judge_delta_at_target: float | None
    judge_delta_final: float | None


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def finished_steps(run_dir: Path) -> int | None:
    """The step a finished run of this benchmark stopped at (it has checkpoint-final); None if none."""
    if not (run_dir / "checkpoint-final").is_dir():
        return None
    return max(int(row["step"]) for row in read_csv(run_dir / "metrics.csv"))


def train(recipe: str, seed: int, out: Path, steps: int, args: argparse.Namespace, extend: bool = False) -> None:
    """Train `recipe` to `steps` in `out`. `extend`: `out` holds a finished shorter run, which is
    continued (a resume is bitwise the same as training that long at once); otherwise a directory
    without checkpoint-final is an interrupted run of this benchmark and is started over."""
    command = [sys.executable, "-m", "genalign", "train", "--config", recipe, f"trainer.output_dir={out}",
               f"trainer.seed={seed}", f"trainer.num_steps={steps}", f"eval.every={args.eval_every}",
               "trainer.save_every=0", "trainer.progress_bar=false",
               "trainer.resume_from=auto" if extend else "trainer.overwrite=true", *args.overrides]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1")
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"{recipe} seed {seed} failed:\n{completed.stderr[-3000:]}")


CLOCKS = {"wall": ("time_rollout_s", "time_reward_s", "time_train_s"), "cpu": ("time_cpu_s",)}
"""metrics.csv columns whose sum is a step's training seconds, per --clock."""


def time_to_target(recipe: str, seed: int, out: Path, ceiling: float, fraction: float,
                   clock: str = "wall", budget: int | None = None) -> RunResult:
    """Read one finished run directory and find when its eval reward first reached the target,
    looking at steps up to `budget` only (None: all), so a longer run serves a shorter budget."""
    within = lambda row: budget is None or int(row["step"]) <= budget  # noqa: E731
    rows = [row for row in read_csv(out / "metrics.csv") if within(row)]
    evals = [row for row in read_csv(out / "eval_metrics.csv") if within(row)]
    elapsed, cumulative = {}, 0.0
    for row in rows:  # training seconds up to and including each step
        cumulative += sum(float(row[k]) for k in CLOCKS[clock])
        elapsed[int(row["step"])] = cumulative
    by_step = {int(r["step"]): r for r in evals}
    first = by_step[0]
    base = float(first["eval_reward_mean"])
    target = base + fraction * (ceiling - base)
    judge_base = float(first["gold_mean"]) if first.get("gold_mean") else None

    def judge_delta(step: int) -> float | None:
        value = by_step[step].get("gold_mean")
        return float(value) - judge_base if value and judge_base is not None else None

    reached = next((s for s in sorted(by_step) if s > 0 and float(by_step[s]["eval_reward_mean"]) >= target), None)
    last = max(by_step)
    return RunResult(recipe, seed, base, target, reached, elapsed[reached] if reached else None, cumulative,
                     cumulative / len(rows), float(by_step[last]["eval_reward_mean"]),
                     judge_delta(reached) if reached else None, judge_delta(last))


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


def speedups(results: list[RunResult], baseline: str) -> dict[str, list[Ratio | None]]:
    """Per recipe, per seed: the speed-up over `baseline`'s run of the same seed (None where the
    baseline has no run of that seed or neither reached the target)."""
    base = {r.seed: r for r in results if r.recipe == baseline}
    out: dict[str, list[Ratio | None]] = {}
    for r in results:
        b = base.get(r.seed)
        out.setdefault(r.recipe, []).append(speedup(b, r) if b is not None else None)
    return out


def print_table(results: list[RunResult], baselines: list[str], budgets: dict[str, int], clock: str = "wall") -> None:
    """One row per recipe (medians over seeds) with a speed-up column per baseline."""
    columns = {b: speedups(results, b) for b in baselines}
    recipes = list(dict.fromkeys(r.recipe for r in results))
    print(f"\ntarget: base + fraction x (ceiling - base); times are training {'CPU ' if clock == 'cpu' else ''}"
          f"seconds (eval excluded); median over seeds; '>'/'<': a bound, one run missed the target in its budget")
    for i, b in enumerate(baselines):
        print(f"speed-up {i + 1}: over {b}")
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    fmt = lambda x, spec, width: format(x, spec) if x is not None else "-".rjust(width)  # noqa: E731
    header = (f"{'recipe':44s} {'s/step':>7s} {'steps->tgt':>10s} {'sec->tgt':>9s} "
              + "".join(f"{'speed-up ' + str(i + 1):>11s}" for i in range(len(baselines)))
              + f" {'reward@end':>10s} {'judge@tgt':>9s} {'judge@end':>9s} reached")
    print(header)
    print("-" * len(header))
    for recipe in recipes:
        runs = [r for r in results if r.recipe == recipe]
        hit = [r for r in runs if r.target_seconds is not None]
        ratios = "".join(f"{str(median_ratio(columns[b][recipe]) or '-'):>11s}" for b in baselines)
        judge_tgt = med([r.judge_delta_at_target for r in hit if r.judge_delta_at_target is not None])
        judge_end = med([r.judge_delta_final for r in runs if r.judge_delta_final is not None])
        flag = " JUDGE-DROP" if judge_tgt is not None and judge_tgt < 0 else ""
        print(f"{recipe:44s} {med([r.seconds_per_step for r in runs]):7.2f} "
              f"{fmt(med([r.target_step for r in hit]), '10.0f', 10)} "
              f"{fmt(med([r.target_seconds for r in hit]), '9.1f', 9)} {ratios} "
              f"{med([r.final_reward for r in runs]):10.3f} {fmt(judge_tgt, '+9.3f', 9)} "
              f"{fmt(judge_end, '+9.3f', 9)} {len(hit)}/{len(runs)}{flag}")
    print()
    for i, b in enumerate(baselines):
        print(f"per seed, speed-up {i + 1}: " + "; ".join(
            f"{recipe}: " + ", ".join(str(x) if x else "-" for x in columns[b][recipe]) for recipe in recipes))
    base_runs = [r for r in results if r.recipe == baselines[0]]
    if base_runs:
        usual = statistics.mode(budgets.values())
        other = "".join(f"; {recipe}: {steps}" for recipe, steps in budgets.items() if steps != usual)
        print(f"base eval reward {base_runs[0].base:.3f} -> target {base_runs[0].target:.3f} "
              f"(budget {usual} steps per run{other})")


def parse_budgets(items: list[str], recipes: list[str]) -> dict[str, int]:
    """--steps-for RECIPE=STEPS items -> {recipe: steps}; a recipe not in the run is an error."""
    budgets = {}
    for item in items:
        recipe, _, steps = item.rpartition("=")
        if recipe not in recipes or not steps.isdigit() or int(steps) < 1:
            raise SystemExit(f"--steps-for {item!r}: expected RECIPE=STEPS with RECIPE one of --baseline/--recipes")
        budgets[recipe] = int(steps)
    return budgets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", required=True)
    parser.add_argument("--baseline", nargs="+", default=["experiment/toy/shapes_grpo"],
                        help="recipes to compare against: a speed-up column for each; the first sets the summary line")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--steps", type=int, default=100, help="training steps per run (the budget)")
    parser.add_argument("--steps-for", action="append", default=[], metavar="RECIPE=STEPS",
                        help="another budget for one recipe (e.g. a slow baseline that needs longer to reach "
                             "the target); a finished shorter run of it is continued")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--ceiling", type=float, default=1.0, help="the reward's maximum")
    parser.add_argument("--fraction", type=float, default=0.5, help="fraction of the gap to close")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: logged phase seconds; cpu: the training process's CPU seconds")
    parser.add_argument("--out", default=None, help="directory for the runs (default: a temporary one)")
    parser.add_argument("overrides", nargs="*", help="dotlist overrides for every run")
    args = parser.parse_args()
    recipes = list(dict.fromkeys([*args.baseline, *args.recipes]))
    budgets = {recipe: args.steps for recipe in recipes} | parse_budgets(args.steps_for, recipes)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_ttt_"))
    results = []
    for seed in args.seeds:
        for recipe in recipes:
            run_dir = out / f"{recipe.replace('/', '_')}_seed{seed}"
            done = finished_steps(run_dir)
            if done is None or done < budgets[recipe]:
                train(recipe, seed, run_dir, budgets[recipe], args, extend=done is not None)
            result = time_to_target(recipe, seed, run_dir, args.ceiling, args.fraction, args.clock, budgets[recipe])
            results.append(result)
            print(f"{recipe} seed {seed}: target step {result.target_step}, {result.seconds_per_step:.2f} s/step, "
                  f"eval reward {result.base:.3f} -> {result.final_reward:.3f}", flush=True)
    print_table(results, args.baseline, budgets, args.clock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
