"""The toy shapes world: vocabulary, prompt parsing, deterministic anti-aliased rendering."""

import math

import numpy as np
import pytest
import torch

from genalign.data import toy_shapes as ts


def test_vocabulary_is_four_shapes_by_six_colours():
    assert len(ts.SHAPES) == 4 and len(ts.COLOR_NAMES) == 6
    prompts = ts.all_prompts()
    assert len(prompts) == 24 and len(set(prompts)) == 24
    assert prompts[0] == "a red circle" and "an orange square" in prompts


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("a red circle", ("red", "circle")),
        ("An Orange square", ("orange", "square")),
        ("triangle blue", ("blue", "triangle")),
        ("the purple, cross", ("purple", "cross")),
    ],
)
def test_parse_prompt(prompt, expected):
    parsed = ts.parse_prompt(prompt)
    assert (parsed.color, parsed.shape) == expected
    assert ts.parse_prompt(parsed.text) == parsed


def test_empty_prompt_is_unconditional():
    parsed = ts.parse_prompt("   ")
    assert parsed.color is None and parsed.shape is None and parsed.text == ""
    with pytest.raises(ValueError, match="no shape"):
        parsed.shape_index


def test_unknown_words_are_named():
    with pytest.raises(ValueError, match=r"\['pink', 'hexagon'\]"):
        ts.parse_prompt("a pink hexagon")


@pytest.mark.parametrize("prompt", ["a red", "a circle", "a red blue circle", "a red circle square"])
def test_exactly_one_colour_and_one_shape(prompt):
    with pytest.raises(ValueError, match="exactly one colour and one shape"):
        ts.parse_prompt(prompt)


def test_render_is_deterministic_under_the_generator():
    first = ts.render("triangle", "green", np.random.default_rng(3))
    second = ts.render("triangle", "green", np.random.default_rng(3))
    other = ts.render("triangle", "green", np.random.default_rng(4))
    assert first.shape == (ts.IMAGE_SIZE, ts.IMAGE_SIZE, 3) == (32, 32, 3) and first.dtype == np.uint8
    assert np.array_equal(first, second) and not np.array_equal(first, other)


def test_render_paints_the_colour_on_grey_with_antialiased_edges():
    image = ts.render("square", "blue", np.random.default_rng(0)).reshape(-1, 3).astype(int)
    colours = {tuple(p) for p in image}
    assert ts.BACKGROUND in colours and ts.COLORS["blue"] in colours
    # edge pixels are blends, strictly between background and colour on every channel
    assert len(colours) > 2
    # the shape covers between MIN_SIZE^2/2 (triangle-ish) and MAX_SIZE^2 of the canvas
    coverage = (np.abs(image - np.array(ts.BACKGROUND)).sum(1) > 0).mean()
    assert ts.MIN_SIZE**2 * 0.9 <= coverage <= ts.MAX_SIZE**2 + 0.15


def test_centre_jitter_and_extent_bound_where_and_how_big_a_shape_is_drawn():
    """Painted pixels' bounding box: centred within ±jitter·size (plus anti-aliased edge pixels),
    side within extent·size; the default placement reaches far off-centre."""

    def box(image):
        ys, xs = np.nonzero(np.abs(image.astype(int) - np.array(ts.BACKGROUND)).sum(-1) > 0)
        return (xs.min() + xs.max() + 1) / 2, (ys.min() + ys.max() + 1) / 2, xs.max() + 1 - xs.min()

    rng = np.random.default_rng(0)
    for _ in range(50):
        cx, cy, side = box(ts.render("square", "red", rng, extent=(0.6, 0.8), centre_jitter=0.08))
        assert abs(cx - 16) <= 0.08 * 32 + 1 and abs(cy - 16) <= 0.08 * 32 + 1
        assert 0.6 * 32 - 1 <= side <= 0.8 * 32 + 2  # a partly covered pixel on each side
    offsets = [abs(box(ts.render("square", "red", rng))[0] - 16) for _ in range(50)]
    assert max(offsets) > 0.08 * 32 + 1


def test_shapes_differ_in_area_as_geometry_says():
    """Same rng state -> same box; square > circle > cross > triangle in covered area."""

    def area(shape):
        image = ts.render(shape, "red", np.random.default_rng(11)).astype(float)
        return np.abs(image - np.array(ts.BACKGROUND)).sum() / 255

    square, circle, cross, triangle = (area(s) for s in ("square", "circle", "cross", "triangle"))
    assert square > circle > triangle and square > cross
    assert circle / square == pytest.approx(np.pi / 4, rel=0.1)
    assert triangle / square == pytest.approx(0.5, rel=0.1)


def test_random_batch_shapes_and_colour_restriction():
    images, shapes, colours = ts.random_batch(32, np.random.default_rng(0), colors=("red", "blue"))
    assert images.shape == (32, 3, 32, 32) and images.dtype == torch.uint8
    assert shapes.shape == colours.shape == (32,)
    assert set(colours.tolist()) <= {ts.COLOR_NAMES.index("red"), ts.COLOR_NAMES.index("blue")}
    assert set(shapes.tolist()) <= set(range(4))


def test_unit_range_round_trip():
    images, _, _ = ts.random_batch(4, np.random.default_rng(1))
    pixels = ts.to_unit_range(images)
    assert pixels.min() >= -1 and pixels.max() <= 1
    assert torch.equal(ts.from_unit_range(pixels), images)
    assert torch.equal(
        ts.from_unit_range(torch.full((1, 3, 2, 2), 5.0)), torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
    )


def test_color_distance():
    images = torch.zeros(2, 3, 1, 2, dtype=torch.uint8)
    images[0, :, 0, 0] = torch.tensor(ts.COLORS["red"])
    distance = ts.color_distance(images, torch.tensor([0, 0]))  # red
    assert distance[0, 0, 0] == 0
    assert distance[1, 0, 0] == pytest.approx(float(np.linalg.norm(ts.COLORS["red"])))


def test_canvas_quality_by_hand():
    """2x2 images, prompted red (g = 128 grey, c = (220, 40, 40), d = (92, -88, -88), |d|² = 23952)."""
    grey, red = ts.BACKGROUND, ts.COLORS["red"]
    half = tuple((a + b) / 2 for a, b in zip(grey, red))  # (174, 84, 84): an anti-aliased edge, a = 0.5
    pixels = torch.tensor(
        [
            [grey, grey, red, half],  # clean: 2 background, 1 shape, 1 blend counted as shape
            [grey, (128, 200, 128), red, red],  # one green-ish stray pixel on the background
            [red, red, red, red],  # canvas filled
        ],
        dtype=torch.float32,
    ).round()  # [3, 4, 3]
    images = pixels.to(torch.uint8).view(3, 2, 2, 3).permute(0, 3, 1, 2)  # [3, 3, 2, 2]
    quality = ts.canvas_quality(images, torch.tensor([0, 0, 0]))
    # stray pixel (128, 200, 128): offset (0, 72, 0), a = clamp(-72·88/23952) = 0, residual 72 > 48
    torch.testing.assert_close(quality["off_shape_fraction"], torch.tensor([0.0, 0.25, 0.0]))
    # background pixels: [grey, grey] -> 0; [grey, stray] -> (0 + 72) / 2; none -> 0
    torch.testing.assert_close(quality["background_deviation"], torch.tensor([0.0, 36.0, 0.0]))
    torch.testing.assert_close(quality["shape_area"], torch.tensor([0.5, 0.5, 1.0]))


def test_canvas_quality_of_clean_renders_is_clean():
    images, _, colours = ts.random_batch(64, np.random.default_rng(8))
    quality = ts.canvas_quality(images, colours)
    assert quality["off_shape_fraction"].max() == 0
    assert quality["background_deviation"].mean() < 3  # only half-covered edge pixels count
    assert 0.1 < quality["shape_area"].min() and quality["shape_area"].max() < 0.8
    wrong = ts.canvas_quality(images, (colours + 1) % len(ts.COLOR_NAMES))  # the other colour is off-shape
    assert wrong["off_shape_fraction"].mean() > 0.1


def painted_square(level: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A 32x32 image, grey canvas, painted purple over rows/columns 4..27 with a per-pixel
    brightness offset `level` [32, 32] added to every channel; returns (uint8 [1, 3, 32, 32],
    shape mask [1, 32, 32])."""
    image = torch.tensor(ts.BACKGROUND, dtype=torch.float32)[:, None, None].repeat(1, 32, 32)  # [3, 32, 32]
    mask = torch.zeros(32, 32)
    mask[4:28, 4:28] = 1
    purple = torch.tensor(ts.COLORS["purple"], dtype=torch.float32)[:, None, None]  # [3, 1, 1]
    image = torch.where(mask.bool(), purple + level, image)  # [3, 32, 32]
    return image.round().clamp(0, 255).to(torch.uint8)[None], mask[None]


def test_patch_pattern_by_hand():
    """Flat paint scores 0; a zero-mean 4x4 motif added to every patch (to all three channels)
    scores the motif's RMS times sqrt(3), wherever the grid's phase; a level alternating from
    patch to patch has no motif; the canvas is ignored."""
    flat, mask = painted_square(torch.zeros(32, 32))
    assert ts.patch_pattern(flat, mask).item() == 0.0
    motif = torch.tensor([[6.0, -2, -2, 6], [-2, -2, -2, -2], [-2, -2, -2, -2], [6, -2, -2, 6]])  # mean 0
    rms = math.sqrt((4 * 36 + 12 * 4) / 16)  # sqrt(12)
    stamped, mask = painted_square(motif.repeat(8, 8))  # [32, 32]
    torch.testing.assert_close(ts.patch_pattern(stamped, mask), torch.tensor([rms * math.sqrt(3)]))
    shifted, mask = painted_square(torch.roll(motif.repeat(8, 8), shifts=(1, 2), dims=(0, 1)))
    torch.testing.assert_close(ts.patch_pattern(shifted, mask), torch.tensor([rms * math.sqrt(3)]))
    y, x = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
    levels, mask = painted_square(10.0 * (1 - 2 * ((y // 4 + x // 4) % 2)).float())  # +10 / -10 per patch
    assert ts.patch_pattern(levels, mask).item() == 0.0
    empty = torch.tensor(ts.BACKGROUND, dtype=torch.uint8)[None, :, None, None].repeat(1, 1, 32, 32)
    assert ts.patch_pattern(empty, torch.zeros(1, 32, 32)).item() == 0.0  # no shape: 0, not nan


def test_patch_pattern_of_grain_off_the_grid_is_small():
    """Pixel noise (σ 8 per channel) that ignores the grid averages out over the core's patches:
    the core of the 24x24 square holds 16 whole patches, so about 8·sqrt(3·15/16/16) ≈ 3.4, well
    below the motif of the same per-pixel size."""
    grain = torch.randn(32, 32, generator=torch.Generator().manual_seed(0)) * 8  # [32, 32]
    noisy, mask = painted_square(grain)
    assert ts.patch_pattern(noisy, mask).item() < 5.0
    stamped, mask = painted_square(grain[:4, :4].repeat(8, 8))  # the same values, repeated per patch
    assert ts.patch_pattern(stamped, mask).item() > 10.0


def test_patch_pattern_is_a_canvas_quality_measure():
    images, _, colours = ts.random_batch(64, np.random.default_rng(8))
    pattern = ts.canvas_quality(images, colours)["patch_pattern"]
    assert pattern.mean() < 0.5  # flat inside the shape (a whole patch touching a slanted edge can blend)
