"""`genalign pretrain-demo`: regenerate the shipped toy model and its two shape classifiers.

Where it fits: outside the RL loop. It writes a toy model and the `toy_shape` /
`toy_shape_judge` classifiers into `--out` (default `toy_demo/` under the working directory,
never the installed package: `--out builtin` replaces the shipped `genalign/assets/toy/`,
which `model.path=builtin` loads, and is for regenerating them in a checkout). A run uses
another folder with `model.path=DIR reward.kwargs.toy_shape.path=DIR` (the last lines it logs).
It runs the model's pretraining recipe (`models/toy/pretrain.py`: rectified flow on rendered
shapes, its options and their defaults) and the classifiers' training
(`rewards/toy_classifier.py`), each beside what it trains. This command sits above both (the
`demo` layer) because it needs both: it trains the classifiers first and judges the pretrained
model's samples with one.

After training it reports what the demo relies on: shape accuracy (judged by the reward
classifier) and colour accuracy of 10-step ODE samples, with and without CFG. The
classifiers are imported from `genalign.rewards` here only because this command regenerates
both kinds of asset; the policy itself never imports a reward.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import torch

from genalign.data.toy_shapes import (
    BACKGROUND,
    COLOR_NAMES,
    COLORS,
    IMAGE_SIZE,
    all_prompts,
    parse_prompt,
    random_batch,
)
from genalign.models.toy.network import save_toy_model
from genalign.models.toy.policy import ToyPolicy, builtin_dir
from genalign.models.toy.pretrain import DEFAULT_STEPS, SIGMA_SAMPLINGS, PretrainOptions, pretrain_model
from genalign.rewards.toy_classifier import JUDGE_SPEC, REWARD_SPEC, load_classifier, save_classifier, train_classifier
from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask

log = logging.getLogger(__name__)


def color_accuracy(images: torch.Tensor, color_indices: torch.Tensor, min_distance: float = 60.0) -> torch.Tensor:
    """Per sample 1.0 when the mean of its non-background pixels is nearest to the prompted colour:
    uint8 [B, 3, H, W], long [B] -> float32 [B] (0 when nothing differs from the background)."""
    pixels = images.float()  # [B, 3, H, W]
    background = torch.tensor(BACKGROUND, dtype=torch.float32)[None, :, None, None]  # [1, 3, 1, 1]
    foreground = ((pixels - background).norm(dim=1) > min_distance).float()  # [B, H, W]
    counts = foreground.sum(dim=(1, 2))  # [B]
    mean_rgb = (pixels * foreground[:, None]).sum(dim=(2, 3)) / counts.clamp(min=1)[:, None]  # [B, 3]
    palette = torch.tensor([COLORS[c] for c in COLOR_NAMES], dtype=torch.float32)  # [C, 3]
    nearest = torch.cdist(mean_rgb, palette).argmin(dim=1)  # [B]
    return ((nearest == color_indices) & (counts > 0)).float()


@torch.no_grad()
def measure_policy(
    policy: ToyPolicy,
    classifier,
    guidance_scale: float,
    samples_per_prompt: int = 8,
    num_steps: int = 10,
    seed: int = 1234,
) -> dict[str, float]:
    """Shape accuracy (classifier argmax) and colour accuracy of ODE samples over all 24 prompts."""
    prompts = [p for p in all_prompts() for _ in range(samples_per_prompt)]
    cond = policy.encode_prompts(prompts, with_negative=guidance_scale > 1)
    seeds = [seed + i for i in range(len(prompts))]
    noise, generators = initial_noise(seeds, seeds, (3, IMAGE_SIZE, IMAGE_SIZE))
    sigmas = policy.sigmas(num_steps, (3, IMAGE_SIZE, IMAGE_SIZE))
    latents = sample_trajectory(
        policy, cond, noise, generators, sigmas, guidance_scale, 0.0, sde_step_mask(num_steps, 0.0)
    ).latents
    images = policy.decode(latents[:, -1])  # [B, 3, S, S]
    parsed = [parse_prompt(p) for p in prompts]
    shapes = torch.tensor([p.shape_index for p in parsed])  # [B]
    colors = torch.tensor([p.color_index for p in parsed])  # [B]
    shape_acc = (classifier.probabilities(images).argmax(dim=-1) == shapes).float().mean().item()
    return {
        "shape_accuracy": round(shape_acc, 4),
        "color_accuracy": round(color_accuracy(images, colors).mean().item(), 4),
    }


def run_classifiers(out: Path, seed: int, steps: int | None) -> None:
    trained = {}
    for spec in (REWARD_SPEC, JUDGE_SPEC):
        spec = type(spec)(**{**spec.__dict__, "seed": spec.seed + 1000 * seed})
        model, record = train_classifier(spec, steps)
        save_classifier(model, out, spec.name, record)
        trained[spec.name] = model
        log.info(
            "classifier %s: accuracy on clean renders %.4f (%.0fs)",
            spec.name,
            record["render_accuracy"],
            record["train_seconds"],
        )
    rng = np.random.default_rng(777)
    images, _, _ = random_batch(1024, rng)
    agree = (
        (
            trained["toy_shape"].probabilities(images).argmax(-1)
            == trained["toy_shape_judge"].probabilities(images).argmax(-1)
        )
        .float()
        .mean()
        .item()
    )
    log.info("classifier agreement on clean renders: %.4f", agree)


def run_model(
    out: Path, seed: int, steps: int, minutes: float | None, options: PretrainOptions = PretrainOptions()
) -> None:
    transformer, text_encoder, record = pretrain_model(seed, steps, minutes, options=options)
    classifier_dir = out if (out / "toy_shape.safetensors").is_file() else builtin_dir()
    classifier = load_classifier(classifier_dir, "toy_shape")
    policy = ToyPolicy(transformer, text_encoder, torch.device("cpu"))
    record["eval_no_cfg"] = measure_policy(policy, classifier, 1.0)
    record["eval_cfg_3"] = measure_policy(policy, classifier, 3.0)
    log.info("pretrained toy model: without CFG %s, CFG 3 %s", record["eval_no_cfg"], record["eval_cfg_3"])
    save_toy_model(out, transformer, text_encoder, record)
    log.info("wrote %s", out)


DEFAULT_OUT = "toy_demo"
"""`--out`'s default, under the working directory: a run of the command never overwrites the
installed package's assets unless asked (`--out builtin`)."""


def _centre_jitter(text: str) -> float | None:
    """--centre-jitter's value: a number, or "none" for shapes anywhere in the canvas."""
    return None if text == "none" else float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="genalign pretrain-demo", description="Regenerate the toy demo model and/or its shape classifiers."
    )
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"output directory (default: ./{DEFAULT_OUT}); 'builtin' overwrites the shipped "
        "genalign/assets/toy (what model.path=builtin loads), for regenerating it in a checkout",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="model pretraining steps (batch 128)")
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="wall-time cap for model pretraining (the result then depends on machine speed)",
    )
    defaults = PretrainOptions()
    parser.add_argument(
        "--sigma-sampling",
        choices=SIGMA_SAMPLINGS,
        default=defaults.sigma_sampling,
        help=f"noise-level distribution (default: {defaults.sigma_sampling})",
    )
    parser.add_argument(
        "--extent",
        type=float,
        nargs=2,
        default=defaults.extent,
        metavar=("LOW", "HIGH"),
        help=f"shape extent range of the renders, as a fraction of the canvas side "
        f"(default: {defaults.extent[0]} {defaults.extent[1]})",
    )
    parser.add_argument(
        "--centre-jitter",
        type=_centre_jitter,
        default=defaults.centre_jitter,
        help=f"keep shape centres within this fraction of the canvas centre; 'none': anywhere "
        f"(default: {defaults.centre_jitter})",
    )
    parser.add_argument(
        "--caption-noise",
        type=float,
        default=defaults.caption_noise,
        help=f"fraction of captions whose shape word is redrawn at random (default: {defaults.caption_noise})",
    )
    parser.add_argument("--classifier-steps", type=int, default=None, help="override the classifiers' step count")
    parser.add_argument("--what", choices=["model", "classifiers", "all"], default="all")
    args = parser.parse_args(argv)
    try:
        options = PretrainOptions(
            args.sigma_sampling,
            extent=tuple(args.extent),
            centre_jitter=args.centre_jitter,
            caption_noise=args.caption_noise,
        )
    except ValueError as error:
        parser.error(str(error))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = builtin_dir() if args.out == "builtin" else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what in ("classifiers", "all"):
        run_classifiers(out, args.seed, args.classifier_steps)
    if args.what in ("model", "all"):
        run_model(out, args.seed, args.steps, args.minutes, options)
    if args.out != "builtin":
        log.info(
            "to train with it: genalign train model.path=%s reward.kwargs.toy_shape.path=%s "
            "reward.kwargs.toy_shape_judge.path=%s",
            out,
            out,
            out,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
