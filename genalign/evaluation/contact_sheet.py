"""Contact sheets: a grid of evaluation images with their prompts as captions."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import torch
from PIL import Image, ImageDraw, ImageFont

MIN_TILE = 128
"""Small images (16², 64²) are upscaled (nearest) to at least this many pixels a side."""


def make_contact_sheet(images: torch.Tensor, captions: list[str], columns: int | None = None,
                       caption_lines: int = 2) -> Image.Image:
    """uint8 images [B, 3, H, W] + one caption each -> one RGB image, captions under tiles."""
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"contact sheet needs uint8 [B, 3, H, W] images, got {images.dtype} {tuple(images.shape)}")
    if len(captions) != images.shape[0]:
        raise ValueError(f"{len(captions)} captions for {images.shape[0]} images")
    count, _, height, width = images.shape
    scale = max(1, math.ceil(MIN_TILE / min(height, width)))
    tile_w, tile_h = width * scale, height * scale
    columns = columns or min(count, 8)
    rows = math.ceil(count / columns)
    font = ImageFont.load_default()
    line_height = 12
    chars_per_line = max(8, tile_w // 6)
    caption_h = caption_lines * line_height + 4
    sheet = Image.new("RGB", (columns * tile_w, rows * (tile_h + caption_h)), "white")
    draw = ImageDraw.Draw(sheet)
    for index in range(count):
        row, col = divmod(index, columns)
        x, y = col * tile_w, row * (tile_h + caption_h)
        tile = Image.fromarray(images[index].permute(1, 2, 0).cpu().numpy())
        sheet.paste(tile.resize((tile_w, tile_h), Image.NEAREST), (x, y))
        lines = textwrap.wrap(captions[index], chars_per_line)[:caption_lines]
        for number, line in enumerate(lines):
            draw.text((x + 2, y + tile_h + 2 + number * line_height), line, fill="black", font=font)
    return sheet


def save_contact_sheet(path: Path, images: torch.Tensor, captions: list[str], **kwargs) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    make_contact_sheet(images, captions, **kwargs).save(path)
    return path
