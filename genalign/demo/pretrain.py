"""`genalign pretrain-demo`: regenerate the shipped toy model and its two shape classifiers.

Where it fits: outside the RL loop. It writes a toy model and the `toy_shape` /
`toy_shape_judge` classifiers into `--out` (default `toy_demo/` under the working directory,
never the installed package: `--out builtin` replaces the shipped `genalign/assets/toy/`,
which `model.path=builtin` loads, and is for regenerating them in a checkout). A run uses
another folder with `model.path=DIR reward.kwargs.toy_shape.path=DIR` (the last lines it logs).

The model is pretrained with rectified flow on freshly rendered 32x32 shapes (all 4 shapes x 6
colours): x_σ = (1 − σ) x0 + σ ε, the network predicts x̂0 and the loss is on
the implied velocity (x_σ − x̂0) / σ against ε − x0 (network.PREDICTION), 10 % of prompts
replaced by the empty prompt so CFG works, AdamW with warm-up and cosine decay, and an EMA of
the weights (the EMA is what ships). `PretrainOptions` holds the data and noise choices (σ
drawn logit-normal, centred renders, 60 % of captions with a redrawn shape word); its defaults
are the shipped recipe. Deterministic under `--seed` for a fixed `--steps` and
thread count; `--minutes` caps wall time instead (then the step count, and so the weights,
depend on the machine's speed, which is logged).

After training it reports what the demo relies on: shape accuracy (judged by the reward
classifier) and colour accuracy of 10-step ODE samples, with and without CFG. The
classifiers are imported from `genalign.rewards` here only because this command regenerates
both kinds of asset; the policy itself never imports a reward.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from genalign.data.toy_shapes import (BACKGROUND, COLOR_NAMES, COLORS, IMAGE_SIZE, SHAPES, all_prompts, parse_prompt,
                                      random_batch, to_unit_range)
from genalign.models.toy.network import (NULL_TOKEN, ToyTextEncoder, build_transformer, save_toy_model,
                                         velocity_from_x0)
from genalign.models.toy.policy import ToyPolicy, builtin_dir

log = logging.getLogger(__name__)

BATCH_SIZE = 128
LR = 1e-3
WARMUP_STEPS = 100
EMA_DECAY = 0.995
CFG_DROPOUT = 0.1
DEFAULT_STEPS = 5000
SIGMA_SAMPLINGS = ("uniform", "logit_normal")


@dataclass(frozen=True)
class PretrainOptions:
    """What the model is pretrained on and at which noise levels; the defaults are the recipe of
    the shipped weights (recorded in their toy_model.json). The first shipped model (uniform σ,
    shapes anywhere, right captions, 2000 steps) drew ragged blobs: at 0.6 M parameters the
    model needs its training signal where shapes are decided and a narrower placement to draw
    legible shapes on a CPU budget."""

    sigma_sampling: str = "logit_normal"
    """"uniform": σ ~ U(0, 1). "logit_normal": σ = sigmoid(m + s·n), n ~ N(0, 1), which puts the
    training signal at mid-to-high noise where the shape is decided (SD3's logit-normal
    sampling; m = 0.8, s = 0.8 is JiT's P_mean = −0.8, P_std = 0.8 on t = 1 − σ)."""
    logit_mean: float = 0.8
    logit_std: float = 0.8
    extent: tuple[float, float] = (0.6, 0.8)
    """Shape extent range of the renders (fraction of the canvas side); the classifiers see the
    wider toy_shapes (MIN_SIZE, MAX_SIZE)."""
    centre_jitter: float | None = 0.08
    """None: the shape anywhere inside the canvas; else its centre within ±centre_jitter of the
    canvas centre (a narrower distribution the 0.6 M-parameter model learns sooner)."""
    caption_noise: float = 0.6
    """Fraction of captions whose shape word is redrawn uniformly (it may come out right again).
    Why it exists: a base that draws clean shapes but follows the shape word only part of the
    time — like a real text-to-image model with weak prompt adherence — gives RL something
    visible to fix without first repairing the drawing. The colour word is always right."""

    def __post_init__(self) -> None:
        if self.sigma_sampling not in SIGMA_SAMPLINGS:
            raise ValueError(f"pretrain sigma_sampling {self.sigma_sampling!r}: choose one of {SIGMA_SAMPLINGS}")
        if not 0.0 <= self.caption_noise <= 1.0:
            raise ValueError(f"pretrain caption_noise {self.caption_noise}: must lie in [0, 1]")
        if not 0.0 < self.extent[0] <= self.extent[1] <= 1.0:
            raise ValueError(f"pretrain extent {self.extent}: needs 0 < low <= high <= 1")
        if self.centre_jitter is not None and not 0.0 <= self.centre_jitter <= 0.5:
            raise ValueError(f"pretrain centre_jitter {self.centre_jitter}: must lie in [0, 0.5] (or None: anywhere)")
        if self.logit_std <= 0.0:
            raise ValueError(f"pretrain logit_std {self.logit_std}: must be positive")

    def record(self) -> dict:
        """The options as toy_model.json stores them (JSON types: the extent as a list)."""
        return {**asdict(self), "extent": list(self.extent)}


def draw_sigmas(count: int, options: PretrainOptions, generator: torch.Generator) -> torch.Tensor:
    """float32 [count] noise levels in (0, 1) under `options.sigma_sampling`."""
    if options.sigma_sampling == "uniform":
        return torch.rand(count, generator=generator)
    return torch.sigmoid(options.logit_mean + options.logit_std * torch.randn(count, generator=generator))


def caption_shapes(shapes: torch.Tensor, noise: float, rng: np.random.Generator) -> torch.Tensor:
    """The shape indices the captions name: long [B] -> long [B], each redrawn uniformly over
    SHAPES with probability `noise` (so a caption is right with probability 1 − noise·3/4).
    Draws nothing from `rng` when noise is 0, so noise-free runs keep their data stream."""
    if noise == 0.0:
        return shapes
    redrawn = torch.from_numpy(rng.random(shapes.shape[0]) < noise)  # [B]
    drawn = torch.from_numpy(rng.integers(0, len(SHAPES), shapes.shape[0])).long()  # [B]
    return torch.where(redrawn, drawn, shapes)


def lr_factor(step: int, total: int) -> float:
    """Linear warm-up over WARMUP_STEPS, then cosine decay to 10 % at `total`."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    progress = min(1.0, (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def flow_matching_loss(transformer, text_encoder: ToyTextEncoder, images: torch.Tensor, token_ids: torch.Tensor,
                       generator: torch.Generator, options: PretrainOptions = PretrainOptions()) -> torch.Tensor:
    """Rectified-flow loss on uint8 images [B, 3, H, W] with prompt tokens [B, 2]: the transformer
    predicts x̂0, the loss compares the implied velocity (x_σ − x̂0) / σ with ε − x0 (JiT's
    x-prediction with the v-loss; see network.PREDICTION)."""
    x0 = to_unit_range(images)  # [B, 3, H, W]
    noise = torch.randn(x0.shape, generator=generator)  # [B, 3, H, W]
    sigma = draw_sigmas(x0.shape[0], options, generator)  # [B]
    x_sigma = (1 - sigma[:, None, None, None]) * x0 + sigma[:, None, None, None] * noise  # [B, 3, H, W]
    embeds, pooled = text_encoder(token_ids)  # [B, 2, D], [B, 2D]
    x0_hat = transformer(hidden_states=x_sigma, timestep=sigma * 1000.0, encoder_hidden_states=embeds,
                         pooled_projections=pooled, return_dict=False)[0]  # [B, 3, H, W]
    return F.mse_loss(velocity_from_x0(x_sigma, x0_hat.float(), sigma), noise - x0)


def pretrain_model(seed: int, steps: int, minutes: float | None = None, log_every: int = 100,
                   options: PretrainOptions = PretrainOptions()):
    """Train the toy transformer + text encoder; returns (EMA transformer, EMA text encoder, record)."""
    transformer = build_transformer(seed)
    text_encoder = ToyTextEncoder()
    modules = torch.nn.ModuleDict({"transformer": transformer, "text_encoder": text_encoder})
    ema = copy.deepcopy(modules).requires_grad_(False)
    optimizer = torch.optim.AdamW(modules.parameters(), lr=LR, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    null_id = text_encoder.vocab.index(NULL_TOKEN)
    start = time.perf_counter()
    done = 0
    for step in range(steps):
        if minutes is not None and time.perf_counter() - start > 60 * minutes:
            log.warning("pretrain: --minutes=%s reached after %d of %d steps", minutes, step, steps)
            break
        for group in optimizer.param_groups:
            group["lr"] = LR * lr_factor(step, steps)
        images, shapes, colors = random_batch(BATCH_SIZE, rng, extent=options.extent,
                                              centre_jitter=options.centre_jitter)
        captioned = caption_shapes(shapes, options.caption_noise, rng)  # [B]
        token_ids = torch.stack([colors + 1, captioned + 1 + len(COLOR_NAMES)], dim=1)  # [B, 2] ids in VOCAB order
        dropped = torch.rand(BATCH_SIZE, generator=generator) < CFG_DROPOUT  # [B]
        token_ids[dropped] = null_id
        loss = flow_matching_loss(transformer, text_encoder, images, token_ids, generator, options)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(modules.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():
            decay = min(EMA_DECAY, (1 + step) / (10 + step))
            for target, source in zip(ema.parameters(), modules.parameters()):
                target.lerp_(source, 1 - decay)
        done = step + 1
        if log_every and done % log_every == 0:
            log.info("pretrain model: step %d/%d loss %.4f (%.0fs)", done, steps, loss.item(),
                     time.perf_counter() - start)
    record = {"seed": seed, "steps": done, "requested_steps": steps, "batch_size": BATCH_SIZE, "lr": LR,
              "ema_decay": EMA_DECAY, "cfg_dropout": CFG_DROPOUT, "options": options.record(),
              "train_seconds": round(time.perf_counter() - start, 1), "threads": torch.get_num_threads()}
    return ema["transformer"], ema["text_encoder"], record


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
def measure_policy(policy: ToyPolicy, classifier, guidance_scale: float, samples_per_prompt: int = 8,
                   num_steps: int = 10, seed: int = 1234) -> dict[str, float]:
    """Shape accuracy (classifier argmax) and colour accuracy of ODE samples over all 24 prompts."""
    from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask

    prompts = [p for p in all_prompts() for _ in range(samples_per_prompt)]
    cond = policy.encode_prompts(prompts, with_negative=guidance_scale > 1)
    seeds = [seed + i for i in range(len(prompts))]
    noise, generators = initial_noise(seeds, seeds, (3, IMAGE_SIZE, IMAGE_SIZE))
    sigmas = policy.sigmas(num_steps, (3, IMAGE_SIZE, IMAGE_SIZE))
    latents = sample_trajectory(policy, cond, noise, generators, sigmas, guidance_scale, 0.0,
                                sde_step_mask(num_steps, 0.0)).latents
    images = policy.decode(latents[:, -1])  # [B, 3, S, S]
    parsed = [parse_prompt(p) for p in prompts]
    shapes = torch.tensor([p.shape_index for p in parsed])  # [B]
    colors = torch.tensor([p.color_index for p in parsed])  # [B]
    shape_acc = (classifier.probabilities(images).argmax(dim=-1) == shapes).float().mean().item()
    return {"shape_accuracy": round(shape_acc, 4), "color_accuracy": round(color_accuracy(images, colors).mean().item(), 4)}


def run_classifiers(out: Path, seed: int, steps: int | None) -> None:
    from genalign.rewards.toy_classifier import JUDGE_SPEC, REWARD_SPEC, save_classifier, train_classifier

    trained = {}
    for spec in (REWARD_SPEC, JUDGE_SPEC):
        spec = type(spec)(**{**spec.__dict__, "seed": spec.seed + 1000 * seed})
        model, record = train_classifier(spec, steps)
        save_classifier(model, out, spec.name, record)
        trained[spec.name] = model
        log.info("classifier %s: accuracy on clean renders %.4f (%.0fs)", spec.name, record["render_accuracy"],
                 record["train_seconds"])
    rng = np.random.default_rng(777)
    images, _, _ = random_batch(1024, rng)
    agree = (trained["toy_shape"].probabilities(images).argmax(-1)
             == trained["toy_shape_judge"].probabilities(images).argmax(-1)).float().mean().item()
    log.info("classifier agreement on clean renders: %.4f", agree)


def run_model(out: Path, seed: int, steps: int, minutes: float | None,
              options: PretrainOptions = PretrainOptions()) -> None:
    from genalign.rewards.toy_classifier import load_classifier

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
    parser = argparse.ArgumentParser(prog="genalign pretrain-demo",
                                     description="Regenerate the toy demo model and/or its shape classifiers.")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"output directory (default: ./{DEFAULT_OUT}); 'builtin' overwrites the shipped "
                             "genalign/assets/toy (what model.path=builtin loads), for regenerating it in a checkout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="model pretraining steps (batch 128)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="wall-time cap for model pretraining (the result then depends on machine speed)")
    defaults = PretrainOptions()
    parser.add_argument("--sigma-sampling", choices=SIGMA_SAMPLINGS, default=defaults.sigma_sampling,
                        help=f"noise-level distribution (default: {defaults.sigma_sampling})")
    parser.add_argument("--extent", type=float, nargs=2, default=defaults.extent, metavar=("LOW", "HIGH"),
                        help=f"shape extent range of the renders, as a fraction of the canvas side "
                             f"(default: {defaults.extent[0]} {defaults.extent[1]})")
    parser.add_argument("--centre-jitter", type=_centre_jitter, default=defaults.centre_jitter,
                        help=f"keep shape centres within this fraction of the canvas centre; 'none': anywhere "
                             f"(default: {defaults.centre_jitter})")
    parser.add_argument("--caption-noise", type=float, default=defaults.caption_noise,
                        help=f"fraction of captions whose shape word is redrawn at random (default: "
                             f"{defaults.caption_noise})")
    parser.add_argument("--classifier-steps", type=int, default=None, help="override the classifiers' step count")
    parser.add_argument("--what", choices=["model", "classifiers", "all"], default="all")
    args = parser.parse_args(argv)
    try:
        options = PretrainOptions(args.sigma_sampling, extent=tuple(args.extent), centre_jitter=args.centre_jitter,
                                  caption_noise=args.caption_noise)
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
        log.info("to train with it: genalign train model.path=%s reward.kwargs.toy_shape.path=%s "
                 "reward.kwargs.toy_shape_judge.path=%s", out, out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
