"""The toy model's pretraining recipe: how the shipped weights in `genalign/assets/toy/` were made.

Where it fits: outside the RL loop, beside the toy family it trains (as the shape
classifiers' training sits beside them in `rewards/toy_classifier.py`); `genalign
pretrain-demo` (`demo/pretrain.py`) runs it and judges the result with the classifiers.

The model is pretrained with rectified flow on freshly rendered 32x32 shapes (all 4 shapes x 6
colours): x_σ = (1 − σ) x0 + σ ε, the network predicts x̂0 and the loss is on
the implied velocity (x_σ − x̂0) / σ against ε − x0 (network.PREDICTION), 10 % of prompts
replaced by the empty prompt so CFG works, AdamW with warm-up and cosine decay, and an EMA of
the weights (the EMA is what ships). `PretrainOptions` holds the data and noise choices (σ
drawn logit-normal, centred renders, 60 % of captions with a redrawn shape word); its defaults
are the shipped recipe. Deterministic under `seed` for a fixed `steps` and thread count;
`minutes` caps wall time instead (then the step count, and so the weights, depend on the
machine's speed, which is logged).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from genalign.data.toy_shapes import COLOR_NAMES, SHAPES, random_batch, to_unit_range
from genalign.models.toy.network import NULL_TOKEN, ToyTextEncoder, build_transformer, velocity_from_x0

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


def flow_matching_loss(
    transformer,
    text_encoder: ToyTextEncoder,
    images: torch.Tensor,
    token_ids: torch.Tensor,
    generator: torch.Generator,
    options: PretrainOptions = PretrainOptions(),
) -> torch.Tensor:
    """Rectified-flow loss on uint8 images [B, 3, H, W] with prompt tokens [B, 2]: the transformer
    predicts x̂0, the loss compares the implied velocity (x_σ − x̂0) / σ with ε − x0 (JiT's
    x-prediction with the v-loss; see network.PREDICTION)."""
    x0 = to_unit_range(images)  # [B, 3, H, W]
    noise = torch.randn(x0.shape, generator=generator)  # [B, 3, H, W]
    sigma = draw_sigmas(x0.shape[0], options, generator)  # [B]
    x_sigma = (1 - sigma[:, None, None, None]) * x0 + sigma[:, None, None, None] * noise  # [B, 3, H, W]
    embeds, pooled = text_encoder(token_ids)  # [B, 2, D], [B, 2D]
    x0_hat = transformer(
        hidden_states=x_sigma,
        timestep=sigma * 1000.0,
        encoder_hidden_states=embeds,
        pooled_projections=pooled,
        return_dict=False,
    )[0]  # [B, 3, H, W]
    return F.mse_loss(velocity_from_x0(x_sigma, x0_hat.float(), sigma), noise - x0)


def pretrain_model(
    seed: int,
    steps: int,
    minutes: float | None = None,
    log_every: int = 100,
    options: PretrainOptions = PretrainOptions(),
):
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
        images, shapes, colors = random_batch(
            BATCH_SIZE, rng, extent=options.extent, centre_jitter=options.centre_jitter
        )
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
            log.info(
                "pretrain model: step %d/%d loss %.4f (%.0fs)", done, steps, loss.item(), time.perf_counter() - start
            )
    record = {
        "seed": seed,
        "steps": done,
        "requested_steps": steps,
        "batch_size": BATCH_SIZE,
        "lr": LR,
        "ema_decay": EMA_DECAY,
        "cfg_dropout": CFG_DROPOUT,
        "options": options.record(),
        "train_seconds": round(time.perf_counter() - start, 1),
        "threads": torch.get_num_threads(),
    }
    return ema["transformer"], ema["text_encoder"], record
