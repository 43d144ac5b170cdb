"""The shipped image-to-video prompt set (genalign/datasets/i2v): a fresh build of its script,
each size's manifest loading at its recipe's rollout size with one first frame a row, the same
pictures at both sizes, and --check flagging a stale picture."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from support import dataset_builder

from genalign.data.prompts import PACKAGED_DATASETS, load_manifest
from genalign.data.source_images import sources_of

FOLDER = PACKAGED_DATASETS / "i2v"


@pytest.mark.parametrize(("suffix", "size"), [("", 480), ("_240", 240), ("_640", 640)])
def test_shipped_set_is_a_fresh_build_and_loads_at_its_recipes_size(suffix, size):
    assert dataset_builder("i2v").main(["--check"]) == 0
    for split, count in (("train", 16), ("test", 8)):
        examples = load_manifest(str(FOLDER / f"{split}{suffix}.jsonl"), source_size=(size, size))
        assert len(examples) == count and all(len(sources_of(e.metadata)) == 1 for e in examples)
        assert all(e.prompt.startswith(f"the {e.metadata['source']['color']} ") for e in examples)
    colors = {e.metadata["source"]["color"] for e in load_manifest(str(FOLDER / f"test{suffix}.jsonl"))}
    assert colors == {"orange", "purple"}  # held out from training


def test_both_sizes_draw_the_same_picture():
    with (
        Image.open(FOLDER / "images" / "train_05.png") as big,
        Image.open(FOLDER / "images_240" / "train_05.png") as small,
    ):
        shrunk = np.asarray(big.convert("RGB").resize((240, 240), Image.Resampling.BOX), dtype=np.float32)
        drawn = np.asarray(small.convert("RGB"), dtype=np.float32)
    assert np.abs(shrunk - drawn).mean() < 4.0  # the same shape, colour and place; edges anti-aliased apart


def test_check_flags_a_stale_image(tmp_path):
    builder = dataset_builder("i2v")
    assert builder.main(["--out", str(tmp_path), "--size", "32"]) == 0
    assert builder.main(["--check", "--out", str(tmp_path), "--size", "32"]) == 0
    Image.new("RGB", (32, 32)).save(tmp_path / "images" / "test_00.png")
    assert builder.main(["--check", "--out", str(tmp_path), "--size", "32"]) == 1
