"""Wall-clock gain of rollout.overlap=one_step on the CPU demo, at equal samples, with what each run learned.

    python benchmarks/bench_overlap.py [--seeds 42 43] [--steps 60] [--workers 1] [--threads 1] \
        [--out DIR] [-- key=value ...]

For every seed, the default recipe (`experiment/toy/shapes_grpo`) is trained twice with one Ray
rollout worker (its own process) and the trainer in this machine's CPU: `rollout.overlap=off`
and `rollout.overlap=one_step`, everything else equal — the same steps, prompts, samples per
step, and `algorithm.rollout_correction.mode=truncate` in both (the overlapped run needs it, and
the baseline gets the same objective so that only the schedule differs). Each run is a
`genalign train` process with `OMP_NUM_THREADS=--threads`, so the trainer and the worker take a
core each when two are free; on a busier machine the gain shrinks (the schedule cannot make
cores). Printed per run: the training steps' wall seconds (the sum of `time_step_s`:
rollout or its wait, scoring, update, weight sync; evaluation excluded), and the held-out
reward and the independent judge (gold) at step 0 and at the end; then per seed the speed-up
(off's seconds / one_step's) and both runs' judge gains, and the median speed-up over seeds.
A speed-up whose judge gain falls behind the baseline's is not a speed-up: look at both.
Extra arguments are dotlist overrides applied to every run.
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

RECIPE = "experiment/toy/shapes_grpo"
MODES = ("off", "one_step")


@dataclass
class RunFigures:
    mode: str
    seed: int
    step_seconds: float
    reward: tuple[float, float]
    """Held-out reward mean at step 0 and at the last evaluation."""
    judge: tuple[float, float]
    """The independent judge (gold reward) at step 0 and at the last evaluation."""


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def figures(run_dir: Path, mode: str, seed: int) -> RunFigures:
    """A finished run's figures from its metrics.csv and eval_metrics.csv."""
    steps = read_csv(run_dir / "metrics.csv")
    evals = read_csv(run_dir / "eval_metrics.csv")
    first, last = evals[0], evals[-1]
    return RunFigures(
        mode,
        seed,
        sum(float(row["time_step_s"]) for row in steps),
        (float(first["eval_reward_mean"]), float(last["eval_reward_mean"])),
        (float(first["gold_mean"]), float(last["gold_mean"])),
    )


def run(out: Path, mode: str, seed: int, args: argparse.Namespace) -> RunFigures:
    run_dir = out / f"{mode}-seed{seed}"
    command = [
        sys.executable,
        "-m",
        "genalign.train",
        "--config",
        RECIPE,
        f"trainer.output_dir={run_dir}",
        "trainer.overwrite=true",
        "trainer.progress_bar=false",
        f"trainer.seed={seed}",
        f"trainer.num_steps={args.steps}",
        "rollout.engine=ray",
        f"rollout.num_workers={args.workers}",
        f"distributed.resources.rollout.num_workers={args.workers}",
        "algorithm.rollout_correction.mode=truncate",
        f"rollout.overlap={mode}",
        *args.overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return figures(run_dir, mode, seed)


def report(results: list[RunFigures]) -> str:
    lines = ["mode      seed  step s   reward 0 -> end    judge 0 -> end"]
    for r in results:
        lines.append(
            f"{r.mode:<9} {r.seed:<5} {r.step_seconds:7.1f}   {r.reward[0]:.3f} -> {r.reward[1]:.3f}"
            f"     {r.judge[0]:.3f} -> {r.judge[1]:.3f}"
        )
    speedups = []
    for seed in sorted({r.seed for r in results}):
        by_mode = {r.mode: r for r in results if r.seed == seed}
        if set(by_mode) != set(MODES):
            continue
        off, ahead = by_mode["off"], by_mode["one_step"]
        speedup = off.step_seconds / ahead.step_seconds
        speedups.append(speedup)
        lines.append(
            f"seed {seed}: one_step {speedup:.2f}x faster at equal samples; judge gain "
            f"{ahead.judge[1] - ahead.judge[0]:+.3f} (off {off.judge[1] - off.judge[0]:+.3f})"
        )
    if speedups:
        lines.append(f"median speed-up over {len(speedups)} seed(s): {statistics.median(speedups):.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_overlap_"))
    results = [run(out, mode, seed, args) for seed in args.seeds for mode in MODES]
    print(report(results))
    print(f"(runs in {out}; cpu count {os.cpu_count()}, OMP_NUM_THREADS={args.threads})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
