"""Image manifests: offline preference data for Flow-DPO (prompt, chosen image, rejected image)
and image–prompt data for flow-matching SFT (prompt, image).

Where it fits: `algorithm.name=dpo algorithm.dpo.source=offline` trains from
`data.preference_manifest` instead of a rollout. The layout (docs/preference_data.md):
a .jsonl file, one object per line,

    {"prompt": "a red circle", "chosen": "images/0000_w.png", "rejected": "images/0000_l.png"}

with image paths relative to the manifest's folder (absolute paths are taken as given).
Images are RGB (or RGBA/grey, converted) PNG/JPEG files of the rollout's height x width.
`algorithm.name=sft` (source dataset) reads `data.image_manifest`, rows {"prompt", "image"}.
`read_image_rows` checks every row — fields, files, sizes — before any model loads, each
problem naming the file and line; `load_preference_images` and `source_images.load_image` read
the pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from genalign.data.prompts import ManifestError, PromptExample, load_manifest, resolve_data_path
from genalign.data.source_images import image_path_problem, load_image

IMAGE_FIELDS = ("chosen", "rejected")
MAX_REPORTED = 20


@dataclass(frozen=True)
class PreferenceRow:
    prompt: str
    chosen: Path
    rejected: Path
    source: str
    """"manifest:line", for messages."""


@dataclass(frozen=True)
class ImagePromptRow:
    prompt: str
    image: Path
    source: str
    """"manifest:line", for messages."""


def read_image_rows(
    path: str, fields: tuple[str, ...], config_key: str, size: tuple[int, int] | None, layout: str
) -> list[tuple[PromptExample, dict[str, Path]]]:
    """Every row of an image manifest (.jsonl of a "prompt" and the image path `fields`) with
    its resolved image paths; a `ManifestError` lists every bad row (file:line). `size`
    (height, width) also opens each image header and checks its size. `layout` names the row
    format in the messages."""
    if not str(path).lower().endswith(".jsonl"):
        raise ManifestError(f"{config_key}: {path} must be a .jsonl file of {layout} rows (docs/preference_data.md)")
    examples: list[PromptExample] = load_manifest(path, config_key)  # prompt checks, file:line sources
    base = resolve_data_path(path, config_key).parent
    rows, errors = [], []
    for example in examples:
        paths = {}
        for field_name in fields:
            image_path, problem = image_path_problem(example.metadata.get(field_name), field_name, base, size)
            if problem:
                errors.append(f"{example.source} {problem}")
            paths[field_name] = image_path
        if all(paths.values()):
            rows.append((example, paths))
    if errors:
        listed = errors[:MAX_REPORTED] + (
            [f"... and {len(errors) - MAX_REPORTED} more"] if len(errors) > MAX_REPORTED else []
        )
        raise ManifestError(f"{config_key}: {path} has {len(errors)} bad row(s):\n  " + "\n  ".join(listed))
    return rows


def read_preferences(
    path: str, config_key: str = "data.preference_manifest", size: tuple[int, int] | None = None
) -> list[PreferenceRow]:
    """Every row of a preference manifest; a `ManifestError` lists every bad row (file:line).
    `size` (height, width) also opens each image header and checks its size."""
    rows = read_image_rows(path, IMAGE_FIELDS, config_key, size, '{"prompt", "chosen", "rejected"}')
    return [PreferenceRow(row.prompt, paths["chosen"], paths["rejected"], row.source) for row, paths in rows]


def read_image_prompts(
    path: str, config_key: str = "data.image_manifest", size: tuple[int, int] | None = None
) -> list[ImagePromptRow]:
    """Every row of an image–prompt manifest (flow-matching SFT); errors as `read_preferences`."""
    rows = read_image_rows(path, ("image",), config_key, size, '{"prompt", "image"}')
    return [ImagePromptRow(row.prompt, paths["image"], row.source) for row, paths in rows]


def load_preference_images(rows: list[PreferenceRow]) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) uint8 [N, 3, H, W] each, in row order."""
    chosen = torch.stack([load_image(row.chosen) for row in rows])
    rejected = torch.stack([load_image(row.rejected) for row in rows])
    return chosen, rejected
