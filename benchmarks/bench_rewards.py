"""Scores per second of the ocr and jpeg rewards: local runtime vs Ray with 1 and 2 workers.

    python benchmarks/bench_rewards.py [--images 32] [--size 128] [--batch-size 8] [--repeats 2]

One run measures every (reward, runtime) pair on the same images (words rendered with PIL,
prompts quoting them) and prints scores/s and the ratio to the local runtime. The first call
of each runtime (actor start, model load) is excluded. Ray is started locally with as many
CPUs as the machine has; with fewer cores than workers the ratios show contention, not scaling.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

from genalign.rewards.composite import build_reward_runtime  # noqa: E402
from genalign.rewards.config import RewardConfig  # noqa: E402

WORDS = ["cat", "hello", "genalign", "sign", "flow", "reward", "ocr", "image"]


def rendered_batch(count: int, size: int) -> tuple[torch.Tensor, list[str]]:
    """uint8 [count, 3, size, size] images of words, and prompts quoting those words."""
    images, prompts = [], []
    font = ImageFont.load_default(size=size // 5)
    for index in range(count):
        word = WORDS[index % len(WORDS)]
        image = Image.new("RGB", (size, size), "white")
        ImageDraw.Draw(image).text((4, size // 3), word, fill="black", font=font)
        images.append(torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1))
        prompts.append(f'a sign that says "{word}"')
    return torch.stack(images), prompts


def scores_per_second(cfg: RewardConfig, images: torch.Tensor, prompts: list[str], repeats: int) -> float:
    runtime = build_reward_runtime(cfg, "cpu")
    try:
        runtime.score(images, prompts, [])  # warm-up: actor start, first inference
        start = time.perf_counter()
        for _ in range(repeats):
            runtime.score(images, prompts, [])
        return repeats * len(prompts) / (time.perf_counter() - start)
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rewards", default="ocr,jpeg_compressibility")
    args = parser.parse_args()
    images, prompts = rendered_batch(args.images, args.size)
    setups = [
        ("local", dict(runtime="local")),
        ("ray x1", dict(runtime="ray", num_workers=1)),
        ("ray x2", dict(runtime="ray", num_workers=2)),
    ]
    print(
        f"{args.images} images {args.size}x{args.size}, reward.batch_size={args.batch_size}, "
        f"{os.cpu_count()} CPUs, {args.repeats} timed calls each"
    )
    print(f"{'reward':24s} {'runtime':8s} {'scores/s':>10s} {'vs local':>9s}")
    for reward in args.rewards.split(","):
        local_rate = None
        for label, overrides in setups:
            cfg = RewardConfig(components={reward: 1.0}, batch_size=args.batch_size, **overrides)
            rate = scores_per_second(cfg, images, prompts, args.repeats)
            local_rate = local_rate or rate
            print(f"{reward:24s} {label:8s} {rate:10.1f} {rate / local_rate:8.2f}x")


if __name__ == "__main__":
    main()
