"""Source images: the pictures an image-conditioned prompt carries beside its text.

Where it fits: step 1 of the loop. An editing prompt (FLUX.1 Kontext) is text plus zero or
more source images. A .jsonl / .json manifest row names them relative to the manifest's folder,

    {"prompt": "make the cube red", "source_image": "images/0000.png"}
    {"prompt": "put them side by side", "source_images": ["a.png", "b.png"]}

and `load_manifest` resolves and checks them (`resolve_sources`: a missing file, an unreadable
image, or, when the run's size is known, an image of another size is one line naming the file
and the row; every row of a manifest carries the same number). The resolved absolute paths stay
in the row's metadata under `SOURCE_KEY`, so they travel with the prompt wherever metadata goes —
the step's `PromptGroupBatch`, the trajectories, the reward runtimes (Ray and HTTP too: a list
of strings), the evaluation and its contact sheet — and `load_sources` reads the pixels where
they are needed (the collector encodes them once per step; a scorer that compares the edit with
its source reads them). The image helpers here are also what the offline preference manifests use.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
SOURCE_KEY = "source_images"
"""The metadata key holding a row's resolved source image paths (a list of absolute paths)."""
SOURCE_FIELDS = ("source_image", "source_images")
"""The manifest fields naming source images: one path, or a list of paths."""


def image_path_problem(
    value: object, field_name: str, base: Path | None, size: tuple[int, int] | None
) -> tuple[Path | None, str | None]:
    """(the file a manifest row's image field names, None) or (None, why it cannot be used):
    not a path string, not an image suffix, no such file, and with `size` (height, width) an
    unreadable image or one of another size. Relative paths are under `base` (the manifest's
    folder); None: only absolute paths (a Hub dataset has no folder)."""
    if not isinstance(value, str) or not value.strip():
        return None, f'has no "{field_name}" image path (a non-empty string relative to the manifest\'s folder)'
    path = Path(value).expanduser()
    if not path.is_absolute():
        if base is None:
            return None, f'"{field_name}": {value} is relative, and a Hub dataset has no folder to resolve it in'
        path = base / path
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        return None, f'"{field_name}": {value} is not an image file ({", ".join(IMAGE_SUFFIXES)})'
    if not path.is_file():
        return None, f'"{field_name}": {path} does not exist'
    from PIL import Image, UnidentifiedImageError  # lazy: only manifests with images need PIL

    try:
        with Image.open(path) as image:  # the header: format and size, no pixels decoded
            found = (image.height, image.width)
    except (UnidentifiedImageError, OSError) as exc:
        return None, f'"{field_name}": {path} cannot be read as an image ({exc})'
    if size is not None and found != size:
        return None, (
            f'"{field_name}": {path} is {found[0]}x{found[1]}, the rollout is {size[0]}x{size[1]} '
            "(rollout.height x rollout.width)"
        )
    return path, None


def load_image(path: Path | str) -> torch.Tensor:
    """An image file -> uint8 [3, H, W] (RGB; RGBA and grey converted)."""
    from PIL import Image  # lazy: see image_path_problem

    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)  # [H, W, 3]
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1)  # [3, H, W]


def row_sources(record: dict[str, Any], base: Path | None, size: tuple[int, int] | None) -> tuple[list[str], list[str]]:
    """(the row's resolved source paths, its problems): from "source_image" (one path) or
    "source_images" (a list of paths), never both; no field: no sources."""
    present = [name for name in SOURCE_FIELDS if name in record]
    if not present:
        return [], []
    if len(present) > 1:
        return [], ['has both "source_image" and "source_images"; keep one']
    name = present[0]
    values = record[name]
    if name == "source_images" and (not isinstance(values, list) or not values):
        return [], ['has a "source_images" that is not a non-empty list of image paths']
    paths, problems = [], []
    for value in values if name == "source_images" else [values]:
        path, problem = image_path_problem(value, name, base, size)
        if problem:
            problems.append(problem)
        else:
            paths.append(str(path))
    return paths, problems


def sources_of(metadata: dict[str, Any]) -> tuple[str, ...]:
    """A row's resolved source image paths (empty for a text-only prompt)."""
    return tuple(metadata.get(SOURCE_KEY, ()))


def source_count(metadata_rows: Sequence[dict[str, Any]]) -> int:
    """The source images per prompt of these rows (0: text only); ValueError when rows differ
    (a manifest holds one count, `load_manifest` checks it, so this is a mixed batch)."""
    counts = {len(sources_of(row)) for row in metadata_rows}
    if len(counts) > 1:
        raise ValueError(f"prompts with different numbers of source images in one batch: {sorted(counts)}")
    return counts.pop() if counts else 0


def load_sources(metadata_rows: Sequence[dict[str, Any]]) -> torch.Tensor | None:
    """The rows' source images, uint8 [B, S, 3, H, W], or None when the rows carry none."""
    if source_count(metadata_rows) == 0:
        return None
    images = [torch.stack([load_image(path) for path in sources_of(row)]) for row in metadata_rows]  # [S, 3, H, W] each
    shapes = {tuple(image.shape) for image in images}
    if len(shapes) > 1:
        raise ValueError(f"source images of different sizes in one batch: {sorted(shapes)} (one size per run)")
    return torch.stack(images)  # [B, S, 3, H, W]
