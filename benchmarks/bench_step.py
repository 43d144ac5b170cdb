"""Per-phase seconds of training steps of the OCR recipe on a tiny offline SD3 pipeline.

    python benchmarks/bench_step.py [--steps 3] [--size 64] [--reward ocr]

Prints the mean seconds of each phase (rollout, reward, train, eval) and images/s over the
measured steps (step 1 includes the parity preflight and is reported separately).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genalign.models.tiny_random import save_tiny_sd3  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402
from genalign.training.trainer import Trainer  # noqa: E402

PHASES = ["time_rollout_s", "time_reward_s", "time_train_s", "time_eval_s", "images_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=4, help="denoising steps")
    parser.add_argument("--reward", default="ocr")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tiny_sd3(Path(tmp) / "tiny-sd3")
        out = Path(tmp) / "run"
        overrides = [
            f"model.path={model_dir}",
            "model.device=cpu",
            "model.dtype=float32",
            "/base/distributed=local",
            f"rollout.height={args.size}",
            f"rollout.width={args.size}",
            f"rollout.num_steps={args.num_steps}",
            "rollout.n=4",
            "rollout.rollout_batch_size=2",
            "rollout.sample_batch_size=4",
            "actor.gradient_accumulation_steps=1",
            "reward.components.ocr=0.0",
            f"reward.components.{args.reward}=1.0",
            f"eval.num_steps={args.num_steps}",
            "eval.max_prompts=4",
            "eval.every=1",
            f"trainer.num_steps={args.steps}",
            "trainer.save_every=0",
            "trainer.progress_bar=false",
            f"trainer.output_dir={out}",
        ]
        start = time.perf_counter()
        Trainer(load_config("experiment/diffusion/sd3_5/online_grpo_ocr", overrides)).train()
        total = time.perf_counter() - start
        rows = list(csv.DictReader(open(out / "metrics.csv")))
    print(f"tiny SD3 {args.size}x{args.size}, {args.num_steps} denoising steps, 8 samples/step, reward={args.reward}")
    print(f"{'phase':<16}{'step 1':>10}{'later (mean)':>14}")
    for phase in PHASES:
        first = float(rows[0][phase]) if rows[0].get(phase) else float("nan")
        later = [float(r[phase]) for r in rows[1:] if r.get(phase)]
        print(f"{phase:<16}{first:>10.3f}{(statistics.mean(later) if later else float('nan')):>14.3f}")
    print(f"total wall time incl. model load and final checkpoint: {total:.1f}s")


if __name__ == "__main__":
    main()
