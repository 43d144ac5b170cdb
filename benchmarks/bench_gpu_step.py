"""The SD3.5 OCR recipe's training step on a GPU: images/s, phases, TFLOP/s, peak memory.

    python benchmarks/bench_gpu_step.py [--steps 5] [--warmup 2] [--modes eager,compiled]
        [--dtype bfloat16] [key=value ...]

Builds a pipeline of Stable Diffusion 3.5 Medium's exact shapes (2.2 B transformer, CLIP-L,
CLIP-G, T5-XXL encoder, SD3 VAE) from the published configs with random weights, on the
device, offline (`benchmarks/random_weights.py`: the shipped architecture file of
`model.path`; the tokenizers are built in memory and pad/truncate to the real lengths), and
runs `experiment/diffusion/sd3_5/online_grpo_ocr` through the real Trainer at the reference
settings: 512², 10 denoising steps, CFG 4.5, 9 trained steps, KL 0.04, EMA, 16 images per step
(2 prompts x 8), T5 length 128, the jpeg reward scored on a worker thread while the next chunk
samples (reward.async_scoring), in-process rollout.

For each mode (eager, compiled = `model.compile=true`, regional) it prints the mean over the
steps after `--warmup`: whole-step images/s, seconds per phase, the transformer's achieved
TFLOP/s (FLOPs counted once with torch.utils.flop_counter for a CFG forward and a
forward+backward, times the calls a step makes, over the rollout + train seconds), and peak
GPU memory; then the ratios to the reference Flow-GRPO figure (0.90 images/s, measured on an
H100 at these settings, docs/benchmarks.md) and compiled/eager.

Without CUDA it runs the tiny SD3 shapes on the CPU in float32 (64², 4 steps) through the same
code, so CI (tests/integration/test_gpu_suite.py) and developers smoke-test the script; those
numbers mean nothing for speed. `benchmarks/gpu_suite.py` is the one-command GPU suite around it.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: genalign, benchmarks.*

import torch  # noqa: E402

from benchmarks.flow_grpo_reference import Settings, genalign_overrides  # noqa: E402
from benchmarks.gpu_suite import train_steps  # noqa: E402
from benchmarks.random_weights import random_family_overrides  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402

REFERENCE_IMAGES_PER_S = 0.90
"""Flow-GRPO's train_sd3.py at these settings on an H100 (fp32 weights under fp16 autocast)."""
RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"


SETTINGS = Settings(prompts=2)
"""The reference settings with 2 prompt groups of 8: the earlier H100 figures' step."""
CPU_SETTINGS = Settings(resolution=64, num_steps=4, prompts=2)


def overrides(args, out: Path, compiled: bool, gpu: bool) -> list[str]:
    return [
        *random_family_overrides("sd3", "real" if gpu else "tiny"),
        f"model.dtype={args.dtype if gpu else 'float32'}",
        f"model.device={'cuda' if gpu else 'cpu'}",
        f"model.compile={str(compiled).lower()}",
        *genalign_overrides(SETTINGS if gpu else CPU_SETTINGS),
        "eval.every=0",
        "eval.at_start=false",
        f"trainer.num_steps={args.steps}",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *args.overrides,
    ]


def transformer_flops(trainer) -> tuple[float, float, float, int, int, int]:
    """FLOPs of one CFG transformer call of each kind (a rollout forward at the sampling
    chunk; a replay forward+backward and a reference forward at the train micro-batch), and
    the calls of each kind one step makes (reference forwards only with the KL)."""
    from torch.utils.flop_counter import FlopCounterMode

    from genalign.rollout.collector import encode_unique

    policy, cfg, plan = trainer.policy, trainer.cfg, trainer.sizes
    chunk, micro = cfg.rollout.sample_batch_size, plan.train_micro_batch

    def inputs(batch: int):
        latents = torch.randn(batch, *policy.latent_shape(cfg.rollout.height, cfg.rollout.width), device=policy.device)
        cond = encode_unique(policy, ["a sign that says hello"] * batch, with_negative=cfg.rollout.guidance_scale > 1)
        return latents, torch.full((batch,), 0.5, device=policy.device), cond

    latents, sigma, cond = inputs(chunk)  # a rollout call: the sampling chunk, no grad
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        policy.velocity(latents, sigma, cond, cfg.rollout.guidance_scale)
    forward = counter.get_total_flops()
    del latents, sigma, cond
    latents, sigma, cond = inputs(micro)  # a replay call: the train micro-batch, with grad
    with FlopCounterMode(display=False) as counter:
        policy.velocity(latents, sigma, cond, cfg.rollout.guidance_scale).float().square().mean().backward()
    both = counter.get_total_flops()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        policy.velocity(latents, sigma, cond, cfg.rollout.guidance_scale)
    reference = counter.get_total_flops()
    trainer.optimizer.zero_grad(set_to_none=True)
    samples = plan.prompts_per_step * plan.samples_per_prompt
    trained_steps = int(cfg.rollout.num_steps * cfg.algorithm.timestep_fraction)
    micro_batches = samples // plan.train_micro_batch * cfg.actor.num_inner_epochs
    rollout_calls = samples // chunk * cfg.rollout.num_steps
    replay_calls = micro_batches * trained_steps
    reference_calls = replay_calls if cfg.algorithm.kl_beta > 0 else 0
    return forward, both, reference, rollout_calls, replay_calls, reference_calls


def run_mode(args, compiled: bool, gpu: bool) -> dict[str, float]:
    from genalign.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cfg = load_config(RECIPE, overrides(args, out, compiled, gpu))
        if gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        trainer = Trainer(cfg)
        load_s = time.perf_counter() - start
        train_steps(trainer, args.steps)  # the trainer's steps, without the final checkpoint and report
        rows = list(csv.DictReader(open(out / "metrics.csv")))
        peak_gib = torch.cuda.max_memory_allocated() / 2**30 if gpu else float("nan")
        for row in rows:  # printed before the FLOP count, which allocates again
            print(
                f"  step {row['step']}: {float(row['step_images_per_s']):.2f} images/s, rollout "
                f"{float(row['time_rollout_s']):.2f} s, train {float(row['time_train_s']):.2f} s, "
                f"peak {peak_gib:.1f} GiB",
                flush=True,
            )
        if gpu:
            torch.cuda.empty_cache()
        forward, both, reference, rollout_calls, replay_calls, reference_calls = transformer_flops(trainer)
        del trainer
        gc.collect()
    measured = rows[args.warmup :] or rows[-1:]

    def mean(key: str) -> float:
        return statistics.mean(float(r[key]) for r in measured)

    step_flops = rollout_calls * forward + replay_calls * both + reference_calls * reference
    busy_s = mean("time_rollout_s") + mean("time_train_s")
    return {
        "images_per_s": mean("step_images_per_s"),
        "rollout_s": mean("time_rollout_s"),
        "reward_wait_s": mean("time_reward_s"),
        "train_s": mean("time_train_s"),
        "first_step_s": sum(float(rows[0][k]) for k in ("time_rollout_s", "time_reward_s", "time_train_s")),
        "tflops": step_flops / busy_s / 1e12,
        "peak_gib": peak_gib,
        "load_s": load_s,
        "parity": float(rows[0].get("parity_max_abs_log_prob_diff") or "nan"),
        "forward_tflop": forward / 1e12,
        "train_call_tflop": both / 1e12,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps per mode")
    parser.add_argument("--warmup", type=int, default=2, help="leading steps left out of the means")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if gpu else "CPU (tiny shapes, float32: a smoke test, not a speed figure)"
    print(f"device: {device}; {'real' if gpu else 'tiny'} shapes; torch {torch.__version__}", flush=True)
    results = {}
    for mode in args.modes.split(","):
        results[mode] = run_mode(args, compiled=(mode == "compiled"), gpu=gpu)
        print(f"{mode}: " + "  ".join(f"{k}={v:.4g}" for k, v in results[mode].items()), flush=True)
    print(
        f"\n{'mode':<10}{'img/s':>8}{'rollout s':>11}{'reward wait s':>15}{'train s':>9}{'TFLOP/s':>9}"
        f"{'peak GiB':>10}{'step 1 s':>10}{'vs ref':>8}"
    )
    for mode, r in results.items():
        print(
            f"{mode:<10}{r['images_per_s']:>8.3f}{r['rollout_s']:>11.2f}{r['reward_wait_s']:>15.3f}"
            f"{r['train_s']:>9.2f}{r['tflops']:>9.1f}{r['peak_gib']:>10.1f}{r['first_step_s']:>10.1f}"
            f"{r['images_per_s'] / REFERENCE_IMAGES_PER_S if gpu else float('nan'):>7.2f}x"
        )
    if {"eager", "compiled"} <= set(results):
        print(f"compiled / eager: {results['compiled']['images_per_s'] / results['eager']['images_per_s']:.2f}x")
    print(f"reference Flow-GRPO: {REFERENCE_IMAGES_PER_S} images/s (H100, docs/benchmarks.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
