"""Video evaluation artefacts: frame-strip contact sheet layout and the animated GIF preview."""

from __future__ import annotations

import imageio.v3 as iio
import numpy as np
import pytest
import torch

from genalign.evaluation.contact_sheet import make_frame_strip_sheet, save_animated_preview, strip_frames, tile_scale
from genalign.evaluation.evaluator import Evaluator


def videos(count: int = 2, frames: int = 5, side: int = 16) -> torch.Tensor:
    """[B, F, 3, side, side] uint8; video b frame f is filled with 20·b + 40·f."""
    levels = torch.tensor([[20 * b + 40 * f for f in range(frames)] for b in range(count)], dtype=torch.uint8)
    return levels[:, :, None, None, None].expand(-1, -1, 3, side, side).contiguous()


def test_strip_frames_are_evenly_spaced_with_both_ends():
    assert strip_frames(3, 8) == [0, 1, 2]
    assert strip_frames(33, 5) == [0, 8, 16, 24, 32]


def test_frame_strip_sheet_is_one_row_of_frames_per_video():
    media = videos(count=2, frames=5)
    sheet = make_frame_strip_sheet(media, ["a", "b"], max_frames=3, caption_lines=0)
    tile = 16 * tile_scale(16, 16)
    assert sheet.size == (3 * tile, 2 * tile)  # 3 frames (0, 2, 4) across, 2 videos down
    pixels = np.asarray(sheet)
    # row b, column j shows frame (0, 2, 4)[j] of video b: level 20·b + 40·f
    for b in range(2):
        for j, f in enumerate((0, 2, 4)):
            assert pixels[b * tile + 1, j * tile + 1, 0] == 20 * b + 40 * f
    with pytest.raises(ValueError, match=r"\[B, F, 3, H, W\]"):
        make_frame_strip_sheet(media[:, 0], ["a", "b"])


def test_an_image_to_video_strip_starts_each_row_with_its_source():
    media = videos(count=2, frames=3)
    sources = torch.full((2, 1, 3, 16, 16), 250, dtype=torch.uint8)
    sources[1] = 200
    sheet = make_frame_strip_sheet(media, ["a", "b"], caption_lines=0, sources=sources)
    tile = 16 * tile_scale(16, 16)
    assert sheet.size == (4 * tile, 2 * tile)  # source + 3 frames across
    pixels = np.asarray(sheet)
    for b, level in enumerate((250, 200)):
        assert pixels[b * tile + 1, 1, 0] == level  # the source first
        for j in range(3):
            assert pixels[b * tile + 1, (j + 1) * tile + 1, 0] == 20 * b + 40 * j
    with pytest.raises(ValueError, match="sources"):
        make_frame_strip_sheet(media, ["a", "b"], sources=sources[:, :, :, :8])


def test_animated_preview_is_a_gif_with_one_grid_per_frame(tmp_path):
    media = videos(count=2, frames=3)
    path = save_animated_preview(tmp_path / "preview.gif", media, columns=2)
    frames = iio.imread(path, index=None)  # [F, H', W', 3]
    tile = 16 * tile_scale(16, 16)
    assert frames.shape == (3, tile, 2 * tile, 3)
    # GIF frame f: video 0 then video 1 at level 20·b + 40·f (flat colours survive the palette)
    for f in range(3):
        assert frames[f, 1, 1, 0] == 40 * f and frames[f, 1, tile + 1, 0] == 20 + 40 * f


def test_evaluator_writes_strips_and_gif_for_video_and_only_a_sheet_for_images(tmp_path):
    media = videos(count=2, frames=3)
    Evaluator.write_sheets(tmp_path / "video", media, ["a", "b"], torch.tensor([0.5, 0.25]))
    assert sorted(p.name for p in (tmp_path / "video").iterdir()) == ["contact_sheet.png", "preview.gif"]
    Evaluator.write_sheets(tmp_path / "image", media[:, 0], ["a", "b"], torch.tensor([0.5, 0.25]))
    assert sorted(p.name for p in (tmp_path / "image").iterdir()) == ["contact_sheet.png"]
