"""Rollout images/s: in-process engine vs Ray with 1 and 2 workers, plus weight-sync ms/step.

    python benchmarks/bench_rollout.py [--rounds 3] [--size 64] [--num-steps 4] [--prompts 4]

All engines sample the same steps of the OCR recipe on one tiny offline SD3 pipeline in one
run, so the ratios are comparable; each engine is warmed up with one round first. Ray starts
a private local instance with 2 CPUs (one per worker). On a 2-core machine the in-process
engine uses the driver's thread(s) and each Ray worker its own core, so the 2-worker figure
shows the sharding gain and the 1-worker figure the cost of the actor hop (object transfer
of the trajectories). Weight sync is the LoRA push + fingerprint check of every worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402
import torch  # noqa: E402

from genalign.data.prompts import load_manifest  # noqa: E402
from genalign.data.sampler import PromptSampler  # noqa: E402
from genalign.models.tiny_random import save_tiny_sd3  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402
from genalign.rollout.engine import LocalRolloutEngine  # noqa: E402
from genalign.rollout.ray_engine import RayRolloutEngine  # noqa: E402
from genalign.training import setup  # noqa: E402
from genalign.weights.lora import trainable_state_dict  # noqa: E402

PROMPTS = [
    'a sign that says "ray"',
    "a red cube",
    'a poster reading "sync"',
    "a blue circle",
    'a mug printed "fast"',
    "a green triangle",
    'a label that says "lora"',
    "a yellow star",
]


def images_per_s(engine, sampler, spec, rounds: int) -> float:
    engine.generate(sampler.sample(0), spec)  # warm-up (first forward, object store)
    seconds, images = 0.0, 0
    for step in range(1, rounds + 1):
        groups = sampler.sample(step)
        start = time.perf_counter()
        batch = engine.generate(groups, spec)
        seconds += time.perf_counter() - start
        images += len(batch)
    return images / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=4, help="denoising steps")
    parser.add_argument("--prompts", type=int, default=4, help="prompt groups per step (2 samples each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tiny_sd3(Path(tmp) / "tiny-sd3")
        manifest = Path(tmp) / "prompts.txt"
        manifest.write_text("\n".join(PROMPTS) + "\n")

        def config(workers: int):
            return load_config(
                "experiment/diffusion/sd3_5/online_grpo_ocr",
                [
                    f"model.path={model_dir}",
                    "model.device=cpu",
                    "model.dtype=float32",
                    "model.lora.rank=4",
                    "model.lora.alpha=8",
                    f"data.manifest={manifest}",
                    f"data.eval_manifest={manifest}",
                    f"rollout.height={args.size}",
                    f"rollout.width={args.size}",
                    f"rollout.num_steps={args.num_steps}",
                    "rollout.n=2",
                    f"rollout.rollout_batch_size={args.prompts}",
                    "rollout.sample_batch_size=2",
                    "actor.gradient_accumulation_steps=1",
                    "/base/distributed=ray_rollout",
                    f"rollout.num_workers={workers}",
                    f"distributed.resources.rollout.num_workers={workers}",
                ],
            )

        cfg = config(1)
        torch.manual_seed(cfg.trainer.seed)
        policy = setup.build_policy(cfg)
        spec = setup.rollout_spec(cfg)
        sampler = PromptSampler(load_manifest(cfg.data.manifest), args.prompts, 2, cfg.trainer.seed)
        state = trainable_state_dict(policy.transformer)
        rates = {"in-process": images_per_s(LocalRolloutEngine(policy), sampler, spec, args.rounds)}
        sync_ms = {}
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            for workers in (1, 2):
                engine = RayRolloutEngine(config(workers), state, setup.build_policy)
                rates[f"ray x{workers}"] = images_per_s(engine, sampler, spec, args.rounds)
                sync_ms[f"ray x{workers}"] = statistics.mean(
                    1000 * engine.sync(state, version=v)["sync_s"] for v in range(1, args.rounds + 1)
                )
                engine.close()
        finally:
            ray.shutdown()
    payload_kib = sum(t.numel() * t.element_size() for t in state.values()) / 1024
    print(
        f"tiny SD3 {args.size}x{args.size}, {args.num_steps} denoising steps, {2 * args.prompts} images/step, "
        f"{args.rounds} rounds; LoRA payload {payload_kib:.1f} KiB"
    )
    base = rates["in-process"]
    for name, rate in rates.items():
        sync = f"   weight sync {sync_ms[name]:.1f} ms/step" if name in sync_ms else ""
        print(f"{name:>11}: {rate:7.2f} images/s   x{rate / base:.2f} of in-process{sync}")


if __name__ == "__main__":
    main()
