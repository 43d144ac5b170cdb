"""Wall time of the default recipe (what bare `genalign train` runs) and what it learned.

    python benchmarks/bench_default_run.py [--out DIR] [--threads 2] [key=value ...]

Runs `experiment/toy/shapes_grpo` end to end in-process (model load, rollouts, updates,
evaluations, checkpoint) and prints: total seconds, seconds per training step by phase
(rollout / reward / train), evaluation seconds, and the eval-reward and judge (gold) means at
step 0 and at the last step. Extra arguments are dotlist overrides (e.g. trainer.num_steps=20).
The acceptance tests assert learning; this script only reports time (the issue's target is
about three minutes on the project's 2-core CPU box).
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="run directory (default: a temporary directory)")
    parser.add_argument("--threads", type=int, default=2, help="torch/OMP threads")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    from genalign.config.loader import DEFAULT_RECIPE, load_config
    from genalign.training.trainer import Trainer

    out = Path(args.out or tempfile.mkdtemp(prefix="bench_default_run_"))
    start = time.perf_counter()
    cfg = load_config(DEFAULT_RECIPE, [f"trainer.output_dir={out}", "trainer.progress_bar=false", *args.overrides])
    trainer = Trainer(cfg)
    setup_s = time.perf_counter() - start
    trainer.train()
    total_s = time.perf_counter() - start

    rows = read_csv(out / "metrics.csv")
    evals = read_csv(out / "eval_metrics.csv")

    def mean(key: str) -> float:
        values = [float(r[key]) for r in rows if r.get(key)]
        return sum(values) / max(1, len(values))

    eval_s = sum(float(r["time_eval_s"]) for r in rows if r.get("time_eval_s"))
    print(f"recipe {DEFAULT_RECIPE}: {len(rows)} steps, {torch.get_num_threads()} threads, run dir {out}")
    print(f"total {total_s:.1f}s  (setup {setup_s:.1f}s, evaluations after step 0 {eval_s:.1f}s)")
    print(f"per step: rollout {mean('time_rollout_s'):.2f}s  reward {mean('time_reward_s'):.3f}s  "
          f"train {mean('time_train_s'):.2f}s")
    first, last = evals[0], evals[-1]
    for key in ("eval_reward_mean", "gold_mean"):
        if key in first:
            print(f"{key}: step {first['step']} {float(first[key]):.4f} -> step {last['step']} {float(last[key]):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
