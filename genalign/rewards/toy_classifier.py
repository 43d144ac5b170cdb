"""Shape classifiers of the toy world: the training reward `toy_shape` and the judge `toy_shape_judge`.

Where it fits: `rewards/toy.py` scores rollout images with them; `demo/pretrain.py`
(`genalign pretrain-demo --what classifiers`) regenerates the shipped weights in
`genalign/assets/toy/` with `train_classifier`.

Two classifiers with different seeds, widths, augmentations and non-shape sets, so that one
can judge the other: a policy that learns to fool the reward CNN should not also fool an
independently trained network. Both have a fifth "none" class trained on images that show no
clean shape (`non_shapes`). The reward net knows the failures a shape reward invites
(noise, a painted canvas, an empty canvas, a canvas-filling blob, a shape on a dirty
background), so P(prompted shape) rewards a clean, right shape and not a texture. The judge
is wider, sees stronger noise, blur and brightness jitter, and knows more kinds of non-shape
(adding stripes and checkerboards), so a gain that only the reward net sees still shows up
as a gap between the two.

Input: uint8 [B, 3, 32, 32] -> logits [B, C] over `SHAPES` + "none"; colour is ignored by design.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from genalign.data.toy_shapes import (
    BACKGROUND,
    COLOR_NAMES,
    COLORS,
    IMAGE_SIZE,
    SHAPES,
    random_batch,
    render,
    to_unit_range,
)


@dataclass(frozen=True)
class ClassifierSpec:
    """How one classifier is built and trained (recorded next to its weights)."""

    name: str
    seed: int
    width: int
    """Channels of the first conv; the next two have 2x and 4x."""
    noise_std: float
    """Std of Gaussian pixel noise added in [-1, 1] units during training."""
    blur_prob: float
    """Probability of a 3x3 box blur on a training image."""
    brightness_jitter: float
    """Max absolute shift of all pixels in [-1, 1] units."""
    reject_fraction: float = 0.0
    """Fraction of each batch replaced by non-shape images labelled "none" (0: no such class)."""
    reject_kinds: tuple[str, ...] = ()
    """Which `NON_SHAPE_KINDS` those images are drawn from (uniformly)."""
    steps: int = 1500
    batch_size: int = 128
    lr: float = 2e-3

    @property
    def classes(self) -> tuple[str, ...]:
        return SHAPES + ((NONE_CLASS,) if self.reject_fraction > 0 else ())


NONE_CLASS = "none"
NON_SHAPE_KINDS = ("noise", "painted", "empty", "blob", "dirty", "stripes", "checker")
"""See `non_shapes`."""
REWARD_SPEC = ClassifierSpec(
    name="toy_shape",
    seed=1,
    width=16,
    noise_std=0.05,
    blur_prob=0.0,
    brightness_jitter=0.0,
    reject_fraction=0.25,
    reject_kinds=("noise", "painted", "empty", "blob", "dirty"),
)
JUDGE_SPEC = ClassifierSpec(
    name="toy_shape_judge",
    seed=2,
    width=24,
    noise_std=0.15,
    blur_prob=0.3,
    brightness_jitter=0.15,
    reject_fraction=0.25,
    reject_kinds=NON_SHAPE_KINDS,
)


class ShapeClassifier(nn.Module):
    """Three 3x3 conv layers (32 -> 16 -> 8 -> 4 spatial) and a linear head over the classes
    (the 4 shapes, then "none" when the classifier has a reject class). The first layer sees
    full resolution, so single-pixel noise and checkerboards are visible to it."""

    def __init__(self, width: int, num_classes: int = len(SHAPES)):
        super().__init__()
        self.width = width
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(4 * width * (IMAGE_SIZE // 8) ** 2, num_classes)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels float [B, 3, 32, 32] in [-1, 1] -> logits [B, C]."""
        return self.head(self.features(pixels).flatten(1))  # [B, C]

    @torch.no_grad()
    def probabilities(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, 32, 32] -> float32 [B, C] softmax; columns 0-3 are SHAPES in order."""
        device = self.head.weight.device
        return self(to_unit_range(images).to(device)).softmax(dim=-1).float().cpu()  # [B, 4]


def augment(pixels: torch.Tensor, spec: ClassifierSpec, generator: torch.Generator) -> torch.Tensor:
    """Training-time augmentation of pixels [B, 3, H, W] in [-1, 1] (see ClassifierSpec)."""
    batch = pixels.shape[0]
    if spec.blur_prob > 0:
        blurred = F.avg_pool2d(F.pad(pixels, (1, 1, 1, 1), mode="replicate"), 3, stride=1)  # [B, 3, H, W]
        chosen = torch.rand(batch, generator=generator) < spec.blur_prob  # [B]
        pixels = torch.where(chosen[:, None, None, None], blurred, pixels)
    if spec.brightness_jitter > 0:
        shift = (torch.rand(batch, 1, 1, 1, generator=generator) * 2 - 1) * spec.brightness_jitter  # [B, 1, 1, 1]
        pixels = pixels + shift
    if spec.noise_std > 0:
        pixels = pixels + spec.noise_std * torch.randn(pixels.shape, generator=generator)
    return pixels.clamp(-1, 1)


def non_shapes(
    count: int, rng: np.random.Generator, kinds: tuple[str, ...] = NON_SHAPE_KINDS, size: int = IMAGE_SIZE
) -> torch.Tensor:
    """uint8 [count, 3, size, size] images that show no clean shape, each of a kind drawn
    uniformly from `kinds` — the outputs a policy finds when it games a shape classifier:
    "noise" (uniform pixel noise), "painted" (the canvas in one palette colour, partly mixed
    with the background), "empty" (the bare background), "blob" (a palette-coloured ellipse or
    box larger than the canvas: a shape grown until it fills it), "dirty" (a rendered shape on
    a background speckled with noise), "stripes" (random direction and period) and "checker"
    (a 1-2 pixel checkerboard of background and a colour mixed in at random strength)."""
    unknown = sorted(set(kinds) - set(NON_SHAPE_KINDS))
    if unknown or not kinds:
        raise ValueError(f"non_shapes: unknown kinds {unknown} (known: {list(NON_SHAPE_KINDS)})")
    palette = np.array([COLORS[c] for c in COLOR_NAMES], dtype=np.float64)  # [C, 3]
    grey = np.array(BACKGROUND, dtype=np.float64)  # [3]
    rows, cols = np.mgrid[0:size, 0:size]  # [S, S] each
    images = np.empty((count, size, size, 3), dtype=np.float64)
    for index, kind in enumerate(np.asarray(kinds)[rng.integers(0, len(kinds), count)]):
        colour = palette[rng.integers(0, len(palette))]  # [3]
        if kind == "noise":
            images[index] = rng.uniform(0, 255, (size, size, 3))
        elif kind == "painted":
            mix = rng.uniform(0.6, 1.0)
            images[index] = mix * colour + (1 - mix) * grey
        elif kind == "empty":
            images[index] = grey
        elif kind == "blob":  # centre inside the canvas, half-extent 0.55-0.9 of the side: it fills most of it
            cy, cx = rng.uniform(0.3, 0.7, 2) * size
            half = rng.uniform(0.55, 0.9, 2) * size
            if rng.random() < 0.5:
                inside = ((rows + 0.5 - cy) / half[0]) ** 2 + ((cols + 0.5 - cx) / half[1]) ** 2 <= 1
            else:
                inside = (np.abs(rows + 0.5 - cy) <= half[0]) & (np.abs(cols + 0.5 - cx) <= half[1])
            images[index] = np.where(inside[..., None], colour, grey)
        elif kind == "dirty":  # speckle the background only: the shape itself stays clean
            shape = render(
                SHAPES[rng.integers(0, len(SHAPES))], COLOR_NAMES[rng.integers(0, len(COLOR_NAMES))], rng, size
            ).astype(np.float64)  # [S, S, 3]
            background = np.abs(shape - grey).sum(axis=-1, keepdims=True) < 1  # [S, S, 1]
            speckle = rng.normal(0, rng.uniform(15, 60), (size, size, 3))  # [S, S, 3]
            images[index] = np.where(background, grey + speckle, shape)
        elif kind == "stripes":
            period = rng.integers(2, 8)
            coordinate = [rows, cols, rows + cols, rows - cols][rng.integers(0, 4)]
            on = ((coordinate // max(1, period // 2)) % 2 == 0)[..., None]  # [S, S, 1]
            images[index] = np.where(on, colour, grey)
        else:  # checker
            cell = rng.integers(1, 3)
            on = (((rows // cell) + (cols // cell)) % 2 == 0)[..., None]  # [S, S, 1]
            mix = rng.uniform(0.2, 1.0)
            images[index] = np.where(on, mix * colour + (1 - mix) * grey, grey)
    pixels = torch.from_numpy(images.round().clip(0, 255).astype(np.uint8))  # [count, S, S, 3]
    return pixels.permute(0, 3, 1, 2).contiguous()  # [count, 3, S, S]


def train_classifier(
    spec: ClassifierSpec, steps: int | None = None, log_every: int = 250
) -> tuple[ShapeClassifier, dict]:
    """Train one classifier on freshly rendered images (deterministic under spec.seed on a
    fixed thread count). Returns (classifier in eval mode, record with held-out accuracy)."""
    steps = spec.steps if steps is None else steps
    torch.manual_seed(spec.seed)
    rng = np.random.default_rng(spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    model = ShapeClassifier(spec.width, len(spec.classes))
    num_rejects = int(round(spec.reject_fraction * spec.batch_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=spec.lr, total_steps=steps, pct_start=0.1)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        images, shapes, _ = random_batch(spec.batch_size, rng)
        if num_rejects:
            images[:num_rejects] = non_shapes(num_rejects, rng, spec.reject_kinds)
            shapes[:num_rejects] = len(SHAPES)  # the "none" class
        loss = F.cross_entropy(model(augment(to_unit_range(images), spec, generator)), shapes)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if log_every and step % log_every == 0:
            print(
                f"[{spec.name}] step {step}/{steps} loss {loss.item():.4f} ({time.perf_counter() - start:.0f}s)",
                flush=True,
            )
    model.eval()
    accuracy = render_accuracy(model, np.random.default_rng(10_000 + spec.seed))
    record = {
        "spec": asdict(spec),
        "steps": steps,
        "render_accuracy": accuracy,
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    return model, record


@torch.no_grad()
def render_accuracy(model: ShapeClassifier, rng: np.random.Generator, count: int = 2048) -> float:
    """Shape accuracy on `count` fresh clean renders (a "none" answer counts as wrong)."""
    images, shapes, _ = random_batch(count, rng)
    return (model.probabilities(images).argmax(dim=-1) == shapes).float().mean().item()


def save_classifier(model: ShapeClassifier, directory: str | Path, name: str, record: dict) -> Path:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
        str(directory / f"{name}.safetensors"),
    )
    classes = list(SHAPES) + [NONE_CLASS] * (model.num_classes - len(SHAPES))
    (directory / f"{name}.json").write_text(
        json.dumps({"width": model.width, "image_size": IMAGE_SIZE, "classes": classes, **record}, indent=1)
    )
    return directory / f"{name}.safetensors"


def load_classifier(directory: str | Path, name: str, device: str | torch.device = "cpu") -> ShapeClassifier:
    """The classifier `name` (toy_shape | toy_shape_judge) from `directory`, in eval mode."""
    from safetensors.torch import load_file

    directory = Path(directory)
    weights, config_path = directory / f"{name}.safetensors", directory / f"{name}.json"
    if not weights.is_file() or not config_path.is_file():
        raise FileNotFoundError(
            f"reward {name!r}: no classifier {weights} (+ .json); regenerate it with "
            "`genalign pretrain-demo --what classifiers`"
        )
    config = json.loads(config_path.read_text())
    if config.get("image_size", 16) != IMAGE_SIZE:  # written before the image size was recorded: 16
        raise ValueError(
            f"{config_path}: classifier for {config.get('image_size', 16)}-pixel images, the toy world "
            f"draws {IMAGE_SIZE}; regenerate it with `genalign pretrain-demo --what classifiers`"
        )
    classes = tuple(config["classes"])
    if classes[: len(SHAPES)] != SHAPES or classes[len(SHAPES) :] not in ((), (NONE_CLASS,)):
        raise ValueError(
            f"{config_path}: classifier classes {list(classes)} differ from the toy world "
            f"{list(SHAPES)} (+ {NONE_CLASS!r}); regenerate it with `genalign pretrain-demo --what classifiers`"
        )
    model = ShapeClassifier(int(config["width"]), len(classes))
    model.load_state_dict(load_file(str(weights)), strict=True)
    return model.to(device).eval().requires_grad_(False)


def builtin_classifier_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "assets" / "toy"
