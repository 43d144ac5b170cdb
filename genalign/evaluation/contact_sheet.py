"""Contact sheets: a grid of evaluation images, each with its prompt as a caption below it.

Where it fits: the evaluator writes `eval_epoch_<step>/contact_sheet.png` after every
evaluation, so a person can see at a glance what the policy draws for the fixed prompts
(and spot reward hacking the numbers miss); an editing evaluation's sheet shows each source
beside its result (`make_edit_sheet`). Tiny test models produce 16² or 64² images, so
tiles are upscaled (nearest neighbour, no blur) to at least `MIN_TILE` pixels a side.
Captions use PIL's built-in default font: no font file is downloaded or required.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from PIL import Image, ImageDraw, ImageFont

from genalign.config.errors import disk_full_is_user_error

MIN_TILE = 128
"""Tiles are upscaled by an integer factor until their shorter side is at least this."""
MAX_COLUMNS = 8
"""Default column count cap when `columns` is not given."""
PADDING = 4
"""Pixels between a tile's image and its caption text, and at the caption's left edge."""


def tile_scale(height: int, width: int) -> int:
    """Integer nearest-neighbour upscale factor so that min(H, W)·scale >= MIN_TILE."""
    return max(1, math.ceil(MIN_TILE / min(height, width)))


def wrap_caption(
    text: str, font: ImageFont.ImageFont | ImageFont.FreeTypeFont, max_width: int, max_lines: int
) -> list[str]:
    """Greedy word wrap measured in pixels; a word wider than a line is cut; text beyond
    `max_lines` is dropped and the last line ends with "..."."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if font.getlength(candidate) <= max_width:
            current = candidate
            continue
        if current:
            lines.append(current)
        while font.getlength(word) > max_width and len(word) > 1:  # hard-cut an over-long word
            cut = 1
            while cut < len(word) and font.getlength(word[: cut + 1]) <= max_width:
                cut += 1
            lines.append(word[:cut])
            word = word[cut:]
        current = word
    if current:
        lines.append(current)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and font.getlength(last + "...") > max_width:
            last = last[:-1]
        lines = lines[: max_lines - 1] + [last.rstrip() + "..."]
    return lines


def make_contact_sheet(
    images: torch.Tensor, captions: list[str], columns: int | None = None, caption_lines: int = 2
) -> Image.Image:
    """uint8 images [B, 3, H, W] + one caption each -> one white RGB sheet.

    Layout: `columns` tiles a row (default min(B, MAX_COLUMNS)), ceil(B / columns) rows; a
    tile is the upscaled image (W·s x H·s, s = `tile_scale`) over a caption band of
    `caption_lines` lines. Sheet size: (columns·W·s, rows·(H·s + band)).
    """
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"contact sheet needs uint8 [B, 3, H, W] images, got {images.dtype} {tuple(images.shape)}")
    count, _, height, width = images.shape
    if count == 0:
        raise ValueError("contact sheet needs at least one image")
    if len(captions) != count:
        raise ValueError(f"contact sheet got {len(captions)} captions for {count} images")
    if columns is not None and columns < 1:
        raise ValueError(f"contact sheet columns must be >= 1, got {columns}")
    if caption_lines < 0:
        raise ValueError(f"caption_lines must be >= 0, got {caption_lines}")
    scale = tile_scale(height, width)
    tile_w, tile_h = width * scale, height * scale
    columns = columns or min(count, MAX_COLUMNS)
    rows = math.ceil(count / columns)
    font = ImageFont.load_default()
    line_height = font.getbbox("Ag")[3] + 2  # glyph bottom + leading
    band = caption_lines * line_height + 2 * PADDING if caption_lines else 0
    sheet = Image.new("RGB", (columns * tile_w, rows * (tile_h + band)), "white")
    draw = ImageDraw.Draw(sheet)
    pixels = images.permute(0, 2, 3, 1).cpu().numpy()  # [B, H, W, 3]
    for index in range(count):
        row, column = divmod(index, columns)
        x, y = column * tile_w, row * (tile_h + band)
        tile = Image.fromarray(pixels[index]).resize((tile_w, tile_h), Image.Resampling.NEAREST)
        sheet.paste(tile, (x, y))
        lines = wrap_caption(captions[index], font, tile_w - 2 * PADDING, caption_lines) if caption_lines else []
        for number, line in enumerate(lines):
            draw.text((x + PADDING, y + tile_h + PADDING + number * line_height), line, fill="black", font=font)
    return sheet


def make_edit_sheet(
    sources: torch.Tensor, results: torch.Tensor, captions: list[str], caption_lines: int = 2
) -> Image.Image:
    """An editing evaluation's sheet: one row per sample, its source images (uint8 [B, S, 3, H, W])
    left to right, then its result (uint8 [B, 3, H, W]) carrying the caption, so each row reads
    source -> result."""
    if sources.dim() != 5 or sources.shape[0] != results.shape[0] or sources.shape[2:] != results.shape[1:]:
        raise ValueError(
            f"edit sheet needs sources [B, S, 3, H, W] of the results' size {tuple(results.shape)}, "
            f"got {tuple(sources.shape)}"
        )
    count = sources.shape[1]
    tiles = torch.cat([sources, results[:, None]], dim=1).flatten(0, 1)  # [B·(S+1), 3, H, W]
    labels = ["source" if count == 1 else f"source {i + 1}" for i in range(count)]
    tile_captions = [text for caption in captions for text in [*labels, caption]]
    return make_contact_sheet(tiles, tile_captions, columns=count + 1, caption_lines=caption_lines)


def save_contact_sheet(
    path: Path, images: torch.Tensor, captions: list[str], columns: int | None = None, caption_lines: int = 2
) -> Path:
    """Build the sheet and write it as PNG to `path` (parent folders created); returns `path`."""
    return save_image(path, make_contact_sheet(images, captions, columns=columns, caption_lines=caption_lines))


def save_image(path: Path, image: Image.Image) -> Path:
    """Write `image` as PNG to `path` (parent folders created); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with disk_full_is_user_error(path):
        image.save(path, format="PNG")
    return path


def strip_frames(num_frames: int, max_frames: int) -> list[int]:
    """Evenly spaced frame indices, first and last included, at most `max_frames` of them."""
    if num_frames <= max_frames:
        return list(range(num_frames))
    return torch.linspace(0, num_frames - 1, max_frames).round().long().tolist()


def make_frame_strip_sheet(
    videos: torch.Tensor,
    captions: list[str],
    max_frames: int = 8,
    caption_lines: int = 2,
    sources: torch.Tensor | None = None,
) -> Image.Image:
    """uint8 video [B, F, 3, H, W] -> one row per video: up to `max_frames` evenly spaced
    frames left to right; the first frame carries the caption, the others their frame index.
    With `sources` (uint8 [B, S, 3, H, W], an image-to-video prompt's source images) each row
    starts with them, so it reads source -> video."""
    if videos.dtype != torch.uint8 or videos.dim() != 5 or videos.shape[2] != 3:
        raise ValueError(f"frame strips need uint8 video [B, F, 3, H, W], got {videos.dtype} {tuple(videos.shape)}")
    if len(captions) != videos.shape[0]:
        raise ValueError(f"frame strips got {len(captions)} captions for {videos.shape[0]} videos")
    if sources is not None and (
        sources.dim() != 5 or sources.shape[0] != videos.shape[0] or sources.shape[2:] != videos.shape[2:]
    ):
        raise ValueError(
            f"frame strips need sources [B, S, 3, H, W] of the videos' frame size {tuple(videos.shape)}, "
            f"got {tuple(sources.shape)}"
        )
    frames = strip_frames(videos.shape[1], max_frames)
    tiles = videos[:, frames]  # [B, k, 3, H, W]
    labels = []
    if sources is not None:
        tiles = torch.cat([sources, tiles], dim=1)  # [B, S + k, 3, H, W]
        labels = ["source" if sources.shape[1] == 1 else f"source {i + 1}" for i in range(sources.shape[1])]
    tile_captions = [
        text
        for caption in captions
        for text in [*labels, *(caption if i == 0 else f"frame {frame}" for i, frame in enumerate(frames))]
    ]
    return make_contact_sheet(
        tiles.flatten(0, 1), tile_captions, columns=tiles.shape[1], caption_lines=caption_lines
    )  # tiles [B·(S + k), 3, H, W]


def save_animated_preview(path: Path, videos: torch.Tensor, fps: float = 8.0, columns: int | None = None) -> Path:
    """uint8 video [B, F, 3, H, W] -> an animated GIF (imageio, looping) whose frame f is the
    grid of every video's frame f, tiles upscaled as in the contact sheet."""
    import imageio.v3 as iio
    import numpy as np

    if videos.dtype != torch.uint8 or videos.dim() != 5 or videos.shape[2] != 3:
        raise ValueError(
            f"animated preview needs uint8 video [B, F, 3, H, W], got {videos.dtype} {tuple(videos.shape)}"
        )
    count = videos.shape[0]
    grids = [
        np.asarray(make_contact_sheet(videos[:, frame], [""] * count, columns=columns, caption_lines=0))
        for frame in range(videos.shape[1])
    ]  # F x [H', W', 3]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with disk_full_is_user_error(path):
        iio.imwrite(path, np.stack(grids), extension=".gif", duration=1000.0 / fps, loop=0)
    return path
