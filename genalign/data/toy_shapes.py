"""The toy shapes world: 4 shapes x 6 colours on a grey 32x32 canvas.

Where it fits: the shipped CPU demo (`model.family=toy`, recipe `experiment/toy/shapes_grpo`).
The toy policy parses prompts with `parse_prompt`, its pretraining (`models/toy/pretrain.py`)
draws training images with `random_batch`, the toy rewards (`rewards/toy.py`) look up the
prompted shape and colour, and `genalign/datasets/toy/build.py` writes the prompt manifests from
`all_prompts`. Nothing here depends on torch modules beyond tensors. It is the one part of the
demo outside the toy family's folder (`models/toy/`) besides its rewards and their command:
the family and the rewards both read it and a reward never imports a model family, so the
world they share sits in `data/`, below both (docs/architecture.md §6).

A prompt is "a <colour> <shape>" ("a red circle"); articles are optional, word order is free,
and an unknown word is a `ValueError` that names it. The empty prompt is the unconditional
prompt used by classifier-free guidance.

Rendering is deterministic under a `numpy.random.Generator`: each shape is drawn with PIL at
`SUPERSAMPLE`x the output resolution and box-filtered down, which anti-aliases the edges, at a
random size (`MIN_SIZE`-`MAX_SIZE` of the canvas) and position (fully inside the canvas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageDraw

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "cross")
"""Shape vocabulary; the index is the classifier label."""
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "orange": (240, 140, 20),
    "yellow": (235, 225, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 225),
    "purple": (150, 50, 190),
}
"""Colour vocabulary -> the RGB the renderer paints with."""
COLOR_NAMES: tuple[str, ...] = tuple(COLORS)
BACKGROUND: tuple[int, int, int] = (128, 128, 128)
"""Mid grey: 0 in the policy's [-1, 1] pixel space, distinct from every colour."""
ARTICLES = frozenset({"a", "an", "the"})
IMAGE_SIZE = 32
"""Canvas side in pixels: at 32 a shape spans 14-27 pixels, so a triangle, a cross and a circle are
legible at a glance (at 16 their 7-pixel versions were blobs)."""
SUPERSAMPLE = 4
MIN_SIZE = 0.45
MAX_SIZE = 0.85
"""Shape extent as a fraction of the canvas side (bounding box of the shape)."""


@dataclass(frozen=True)
class ToyPrompt:
    """A parsed prompt; `shape`/`color` are None only for the empty (unconditional) prompt."""

    color: str | None
    shape: str | None

    @property
    def shape_index(self) -> int:
        if self.shape is None:
            raise ValueError("the empty prompt has no shape")
        return SHAPES.index(self.shape)

    @property
    def color_index(self) -> int:
        if self.color is None:
            raise ValueError("the empty prompt has no colour")
        return COLOR_NAMES.index(self.color)

    @property
    def text(self) -> str:
        return "" if self.shape is None else prompt_text(self.color, self.shape)


def prompt_text(color: str, shape: str) -> str:
    """The canonical prompt: "a red circle", "an orange square"."""
    article = "an" if color[0] in "aeiou" else "a"
    return f"{article} {color} {shape}"


def parse_prompt(prompt: str) -> ToyPrompt:
    """ "a red circle" -> ToyPrompt("red", "circle"); "" -> the unconditional prompt.

    Exactly one colour and one shape word are required; every other word except an article is
    an error that names it and lists the vocabulary."""
    words = prompt.lower().replace(",", " ").split()
    if not words:
        return ToyPrompt(None, None)
    unknown = [w for w in words if w not in ARTICLES and w not in COLORS and w not in SHAPES]
    if unknown:
        raise ValueError(
            f"toy prompt {prompt!r}: unknown word(s) {unknown}; the toy world knows the colours "
            f"{list(COLOR_NAMES)} and the shapes {list(SHAPES)} (e.g. 'a red circle')"
        )
    colors = [w for w in words if w in COLORS]
    shapes = [w for w in words if w in SHAPES]
    if len(colors) != 1 or len(shapes) != 1:
        raise ValueError(
            f"toy prompt {prompt!r}: needs exactly one colour and one shape, found colours {colors} "
            f"and shapes {shapes} (e.g. 'a red circle')"
        )
    return ToyPrompt(colors[0], shapes[0])


def all_prompts() -> list[str]:
    """Every canonical prompt, colour-major (24 prompts)."""
    return [prompt_text(color, shape) for color in COLOR_NAMES for shape in SHAPES]


def _shape_polygon(shape: str, cx: float, cy: float, half: float) -> list[tuple[float, float]]:
    """Vertices of a polygonal shape centred at (cx, cy) whose bounding box has side 2*half."""
    if shape == "square":
        return [(cx - half, cy - half), (cx + half, cy - half), (cx + half, cy + half), (cx - half, cy + half)]
    if shape == "triangle":  # upright, equal base and height
        return [(cx, cy - half), (cx + half, cy + half), (cx - half, cy + half)]
    if shape == "cross":  # a plus sign with arms 2/5 of the extent wide
        arm = 0.4 * half
        return [
            (cx - arm, cy - half),
            (cx + arm, cy - half),
            (cx + arm, cy - arm),
            (cx + half, cy - arm),
            (cx + half, cy + arm),
            (cx + arm, cy + arm),
            (cx + arm, cy + half),
            (cx - arm, cy + half),
            (cx - arm, cy + arm),
            (cx - half, cy + arm),
            (cx - half, cy - arm),
            (cx - arm, cy - arm),
        ]
    raise ValueError(f"no polygon for shape {shape!r}")


def render(
    shape: str,
    color: str,
    rng: np.random.Generator,
    size: int = IMAGE_SIZE,
    extent: tuple[float, float] = (MIN_SIZE, MAX_SIZE),
    centre_jitter: float | None = None,
) -> np.ndarray:
    """One anti-aliased image, uint8 [size, size, 3]: `shape` in `color` on the grey background,
    at a random extent in `extent` x size and a random position fully inside the canvas —
    anywhere (`centre_jitter=None`), or within ±centre_jitter x size of the centre."""
    if shape not in SHAPES or color not in COLORS:
        raise ValueError(f"render: unknown shape {shape!r} or colour {color!r}")
    big = size * SUPERSAMPLE
    half = rng.uniform(*extent) * big / 2  # half the side of the bounding box, in supersampled pixels
    low, high = half, big - half  # centres that keep the shape inside the canvas
    if centre_jitter is not None:
        low, high = max(low, big / 2 - centre_jitter * big), min(high, big / 2 + centre_jitter * big)
    cx = rng.uniform(low, high)
    cy = rng.uniform(low, high)
    canvas = Image.new("RGB", (big, big), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    if shape == "circle":
        draw.ellipse([cx - half, cy - half, cx + half, cy + half], fill=COLORS[color])
    else:
        draw.polygon(_shape_polygon(shape, cx, cy, half), fill=COLORS[color])
    return np.asarray(canvas.resize((size, size), Image.Resampling.BOX))  # [size, size, 3]


def render_batch(
    shape_indices: list[int], color_indices: list[int], rng: np.random.Generator, size: int = IMAGE_SIZE, **placement
) -> torch.Tensor:
    """uint8 [B, 3, size, size] images of the given (shape, colour) index pairs; `placement`
    (extent, centre_jitter) is passed to `render`."""
    images = [render(SHAPES[s], COLOR_NAMES[c], rng, size, **placement) for s, c in zip(shape_indices, color_indices)]
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()  # [B, 3, H, W]


def random_batch(
    batch_size: int, rng: np.random.Generator, colors: tuple[str, ...] = COLOR_NAMES, **placement
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A uniformly drawn batch: (images uint8 [B, 3, S, S], shape indices [B], colour indices [B]).

    `colors` restricts the colours drawn (indices stay those of COLOR_NAMES); `placement`
    (extent, centre_jitter) is passed to `render`."""
    allowed = [COLOR_NAMES.index(c) for c in colors]
    shape_indices = rng.integers(0, len(SHAPES), batch_size)  # [B]
    color_indices = np.asarray(allowed)[rng.integers(0, len(allowed), batch_size)]  # [B]
    images = render_batch(shape_indices.tolist(), color_indices.tolist(), rng, **placement)
    return images, torch.from_numpy(shape_indices).long(), torch.from_numpy(color_indices).long()


def to_unit_range(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> float32 [B, 3, H, W] in [-1, 1] (the toy policy's pixel latents)."""
    return images.float() / 127.5 - 1.0


def from_unit_range(pixels: torch.Tensor) -> torch.Tensor:
    """float [B, 3, H, W] in [-1, 1] -> uint8 [B, 3, H, W] (clamped, rounded)."""
    return ((pixels.float().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)


def color_distance(images: torch.Tensor, color_indices: torch.Tensor) -> torch.Tensor:
    """Euclidean RGB distance of every pixel to its sample's colour: uint8 [B, 3, H, W],
    long [B] -> float32 [B, H, W] (0 = exactly the colour; the max possible is 255*sqrt(3))."""
    palette = torch.tensor([COLORS[name] for name in COLOR_NAMES], dtype=torch.float32)  # [C, 3]
    target = palette[color_indices]  # [B, 3]
    diff = images.float() - target[:, :, None, None]  # [B, 3, H, W]
    return diff.pow(2).sum(dim=1).sqrt()  # [B, H, W]


MAX_COLOR_DISTANCE = 255 * math.sqrt(3)


OFF_SHAPE_TOLERANCE = 48.0
"""RGB distance from the canvas-to-colour blend line beyond which a pixel is "off-shape"."""


def canvas_quality(
    images: torch.Tensor, color_indices: torch.Tensor, tolerance: float = OFF_SHAPE_TOLERANCE
) -> dict[str, torch.Tensor]:
    """The image-quality guard of the toy demo: does the image stay a clean shape on the canvas?

    uint8 [B, 3, H, W], long [B] -> {name: float32 [B]}. Every pixel p of a clean render lies
    on the segment from the canvas grey g to the prompted colour c (anti-aliased edges are
    blends), so with d = c - g, a = clamp((p - g)·d / |d|², 0, 1) and the residual
    r = |p - (g + a d)|:
    - "off_shape_fraction": fraction of pixels with r > tolerance — neither canvas, nor the
      prompted colour, nor a blend of the two (noise, checkerboards, a wrong colour);
    - "background_deviation": mean RGB distance |p - g| over the background pixels (a < 0.5),
      0 when there are none — how far the canvas drifted from its grey;
    - "shape_area": fraction of pixels with a >= 0.5 — the painted area (a render covers
      0.45²·π/4 ≈ 0.16 to 0.85² ≈ 0.72 of the canvas; a canvas-filling blob approaches 1);
    - "patch_pattern": the motif repeated in every 4x4 patch inside the shape — the visible
      checkerboard of the patch grid (`patch_pattern`, RGB units; 0 for a flat render).
    """
    pixels = images.float().permute(0, 2, 3, 1)  # [B, H, W, 3]
    canvas = torch.tensor(BACKGROUND, dtype=torch.float32)  # [3]
    palette = torch.tensor([COLORS[name] for name in COLOR_NAMES], dtype=torch.float32)  # [C, 3]
    direction = (palette[color_indices] - canvas)[:, None, None, :]  # [B, 1, 1, 3]
    offset = pixels - canvas  # [B, H, W, 3]
    along = ((offset * direction).sum(-1) / direction.pow(2).sum(-1)).clamp(0, 1)  # [B, H, W]
    residual = (offset - along[..., None] * direction).norm(dim=-1)  # [B, H, W]
    background = (along < 0.5).float()  # [B, H, W]
    deviation = (offset.norm(dim=-1) * background).sum(dim=(1, 2)) / background.sum(dim=(1, 2)).clamp(min=1)  # [B]
    return {
        "off_shape_fraction": (residual > tolerance).float().mean(dim=(1, 2)),
        "background_deviation": deviation,
        "shape_area": 1.0 - background.mean(dim=(1, 2)),
        "patch_pattern": patch_pattern(images, (along >= 0.5).float()),
    }


PATCH_SIZE = 4
"""The demo transformer's patch side in pixels (models/toy/network builds with it): its 8x8 token
grid tiles a 32x32 image with 4x4 pixel patches, the grid a checkerboard artefact follows."""


def patch_pattern(images: torch.Tensor, shape: torch.Tensor, patch: int = PATCH_SIZE) -> torch.Tensor:
    """The patch-grid pattern inside the shape: uint8 [B, 3, H, W], shape mask float [B, H, W]
    (1 = painted) -> float32 [B], in RGB units.

    A patch-based transformer that drifts paints the same small motif into every patch of its
    token grid: the 4x4 checkerboard seen on trained demo images. Over the patches that lie
    wholly in the shape's core (painted, and so are the 4 neighbours of every pixel: anti-aliased
    edges stay out), each patch minus its own mean is averaged into one [3, patch, patch] motif;
    the measure is the RMS over the patch positions of that motif's RGB length. Flat paint
    scores 0; grain that ignores the grid averages out over the patches (it adds about
    σ·sqrt(3 / patches)); a motif repeated in every patch scores its own RMS. A level that
    changes from patch to patch is removed with each patch's mean and does not count. An image
    with no whole patch in its core scores 0."""
    batch, channels, height, width = images.shape
    padded = torch.nn.functional.pad(shape, (1, 1, 1, 1))  # [B, H+2, W+2], outside counts as unpainted
    core = shape * padded[:, :-2, 1:-1] * padded[:, 2:, 1:-1] * padded[:, 1:-1, :-2] * padded[:, 1:-1, 2:]  # [B, H, W]
    rows, cols = height // patch, width // patch  # whole patches only (an image smaller than one has none)
    pixels = images.float()[:, :, : rows * patch, : cols * patch]  # [B, 3, r·p, c·p]
    tiles = pixels.reshape(batch, channels, rows, patch, cols, patch).permute(0, 2, 4, 1, 3, 5)  # [B, r, c, 3, p, p]
    whole = (
        core[:, : rows * patch, : cols * patch]
        .reshape(batch, rows, patch, cols, patch)
        .permute(0, 1, 3, 2, 4)
        .flatten(3)
        .amin(dim=-1)
    )  # [B, r, c]
    residual = tiles - tiles.mean(dim=(-2, -1), keepdim=True)  # [B, r, c, 3, p, p]
    count = whole.sum(dim=(1, 2))  # [B]
    motif = (residual * whole[..., None, None, None]).sum(dim=(1, 2)) / count.clamp(min=1)[
        :, None, None, None
    ]  # [B, 3, p, p]
    rms = motif.norm(dim=1).pow(2).mean(dim=(1, 2)).sqrt()  # [B]
    return torch.where(count > 0, rms, torch.zeros_like(rms))
