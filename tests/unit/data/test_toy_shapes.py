"""The toy shapes world: vocabulary, prompt parsing, deterministic anti-aliased rendering."""

import numpy as np
import pytest
import torch

from genalign.data import toy_shapes as ts


def test_vocabulary_is_four_shapes_by_six_colours():
    assert len(ts.SHAPES) == 4 and len(ts.COLOR_NAMES) == 6
    prompts = ts.all_prompts()
    assert len(prompts) == 24 and len(set(prompts)) == 24
    assert prompts[0] == "a red circle" and "an orange square" in prompts


@pytest.mark.parametrize("prompt, expected", [
    ("a red circle", ("red", "circle")),
    ("An Orange square", ("orange", "square")),
    ("triangle blue", ("blue", "triangle")),
    ("the purple, cross", ("purple", "cross")),
])
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
    assert first.shape == (16, 16, 3) and first.dtype == np.uint8
    assert np.array_equal(first, second) and not np.array_equal(first, other)


def test_render_paints_the_colour_on_grey_with_antialiased_edges():
    image = ts.render("square", "blue", np.random.default_rng(0)).reshape(-1, 3).astype(int)
    colours = {tuple(p) for p in image}
    assert ts.BACKGROUND in colours and ts.COLORS["blue"] in colours
    # edge pixels are blends, strictly between background and colour on every channel
    assert len(colours) > 2
    # the shape covers between MIN_SIZE^2/2 (triangle-ish) and MAX_SIZE^2 of the canvas
    coverage = (np.abs(image - np.array(ts.BACKGROUND)).sum(1) > 0).mean()
    assert ts.MIN_SIZE ** 2 * 0.9 <= coverage <= ts.MAX_SIZE ** 2 + 0.15


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
    assert images.shape == (32, 3, 16, 16) and images.dtype == torch.uint8
    assert shapes.shape == colours.shape == (32,)
    assert set(colours.tolist()) <= {ts.COLOR_NAMES.index("red"), ts.COLOR_NAMES.index("blue")}
    assert set(shapes.tolist()) <= set(range(4))


def test_unit_range_round_trip():
    images, _, _ = ts.random_batch(4, np.random.default_rng(1))
    pixels = ts.to_unit_range(images)
    assert pixels.min() >= -1 and pixels.max() <= 1
    assert torch.equal(ts.from_unit_range(pixels), images)
    assert torch.equal(ts.from_unit_range(torch.full((1, 3, 2, 2), 5.0)), torch.full((1, 3, 2, 2), 255, dtype=torch.uint8))


def test_color_distance():
    images = torch.zeros(2, 3, 1, 2, dtype=torch.uint8)
    images[0, :, 0, 0] = torch.tensor(ts.COLORS["red"])
    distance = ts.color_distance(images, torch.tensor([0, 0]))  # red
    assert distance[0, 0, 0] == 0
    assert distance[1, 0, 0] == pytest.approx(float(np.linalg.norm(ts.COLORS["red"])))
