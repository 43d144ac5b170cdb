"""Contact sheet: size arithmetic, nearest upscaling, captions drawn under tiles, PNG output."""

import numpy as np
import pytest
import torch
from PIL import Image, ImageFont

from genalign.evaluation.contact_sheet import (
    MIN_TILE,
    PADDING,
    make_contact_sheet,
    save_contact_sheet,
    tile_scale,
    wrap_caption,
)

FONT = ImageFont.load_default()
LINE_HEIGHT = FONT.getbbox("Ag")[3] + 2


def solid(count, size, value=0):
    return torch.full((count, 3, size, size), value, dtype=torch.uint8)


def band(lines):
    return lines * LINE_HEIGHT + 2 * PADDING


@pytest.mark.parametrize("size, scale", [(16, 8), (64, 2), (100, 2), (128, 1), (512, 1)])
def test_tile_scale_reaches_min_tile(size, scale):
    assert tile_scale(size, size) == scale and size * scale >= MIN_TILE


def test_sheet_size_arithmetic():
    sheet = make_contact_sheet(solid(5, 16), ["p"] * 5, columns=2, caption_lines=3)
    assert sheet.size == (2 * 128, 3 * (128 + band(3)))
    default = make_contact_sheet(solid(10, 64), ["p"] * 10)  # 8 columns by default, 2 rows
    assert default.size == (8 * 128, 2 * (128 + band(2)))
    wide = torch.zeros(1, 3, 32, 48, dtype=torch.uint8)  # scale 4 from the shorter side
    assert make_contact_sheet(wide, ["p"], caption_lines=0).size == (192, 128)


def test_upscaling_is_nearest_neighbour():
    image = torch.zeros(1, 3, 16, 16, dtype=torch.uint8)
    image[0, :, :, 8:] = 255  # right half white, left half black
    pixels = np.asarray(make_contact_sheet(image, ["x"], caption_lines=0))
    assert (pixels[:, :64] == 0).all() and (pixels[:, 64:] == 255).all()  # a sharp edge, no blur


def test_caption_is_drawn_below_each_tile_and_only_where_given():
    sheet = np.asarray(make_contact_sheet(solid(3, 16, 255), ['A sign that says "OPEN"', "", "cake"], columns=3))
    caption = sheet[128:, :]  # the caption band under the (white) tiles
    inked = [(caption[:, column * 128 : (column + 1) * 128] < 128).any() for column in range(3)]
    assert inked == [True, False, True]
    assert (sheet[:128] == 255).all()  # nothing drawn over the images


def test_wrap_caption_fits_width_and_marks_truncation():
    text = 'A vintage photograph of a rusty metal sign on a busy city street that says "MIND THE GAP"'
    wrapped = wrap_caption(text, FONT, 120, 2)
    assert len(wrapped) == 2 and wrapped[-1].endswith("...")
    assert all(FONT.getlength(line) <= 120 for line in wrapped)
    assert wrap_caption("short", FONT, 120, 2) == ["short"]
    long_word = wrap_caption("x" * 200, FONT, 60, 100)
    assert "".join(long_word) == "x" * 200 and all(FONT.getlength(line) <= 60 for line in long_word)


def test_save_writes_a_png(tmp_path):
    path = save_contact_sheet(tmp_path / "eval_epoch_3" / "contact_sheet.png", solid(2, 64, 90), ["a", "b"])
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (256, 128 + band(2))


@pytest.mark.parametrize(
    "images, captions, kwargs, message",
    [
        (torch.zeros(2, 3, 8, 8), ["a", "b"], {}, "uint8"),
        (torch.zeros(2, 4, 8, 8, dtype=torch.uint8), ["a", "b"], {}, r"\[B, 3, H, W\]"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.uint8), ["a"], {}, "1 captions for 2 images"),
        (torch.zeros(0, 3, 8, 8, dtype=torch.uint8), [], {}, "at least one image"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.uint8), ["a", "b"], {"columns": 0}, "columns must be >= 1"),
    ],
)
def test_bad_inputs_are_errors(images, captions, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_contact_sheet(images, captions, **kwargs)


def test_an_edit_sheet_puts_each_source_beside_its_result():
    from genalign.evaluation.contact_sheet import make_edit_sheet

    sources = torch.zeros(2, 1, 3, 32, 32, dtype=torch.uint8)
    sources[:, 0, 0] = 255  # red sources
    results = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    results[:, 2] = 255  # blue results
    sheet = make_edit_sheet(sources, results, ["make it blue", "again"], caption_lines=0)
    assert sheet.size == (2 * 128, 2 * 128)  # one row per sample: source | result, tiles of 128
    assert sheet.getpixel((10, 10)) == (255, 0, 0) and sheet.getpixel((138, 10)) == (0, 0, 255)
    assert sheet.getpixel((10, 138)) == (255, 0, 0) and sheet.getpixel((138, 138)) == (0, 0, 255)
    with pytest.raises(ValueError, match="edit sheet needs sources"):
        make_edit_sheet(sources[:, :, :, :16], results, ["a", "b"])
