"""Offline preference manifests: rows, files and sizes checked before any model loads."""

import json

import numpy as np
import pytest
from PIL import Image

from genalign.data.preferences import load_preference_images, read_preferences
from genalign.data.prompts import ManifestError
from genalign.data.toy_shapes import IMAGE_SIZE


def write_png(path, size=(16, 16), value=7):
    Image.fromarray(np.full((*size, 3), value, dtype=np.uint8)).save(path)


def test_valid_manifest_loads_images_relative_to_its_folder(tmp_path):
    (tmp_path / "img").mkdir()
    write_png(tmp_path / "img" / "w.png", value=200)
    write_png(tmp_path / "img" / "l.png", value=10)
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text(json.dumps({"prompt": "a red circle", "chosen": "img/w.png", "rejected": "img/l.png"}) + "\n")
    rows = read_preferences(str(manifest), size=(16, 16))
    assert rows[0].prompt == "a red circle" and rows[0].chosen == tmp_path / "img" / "w.png"
    chosen, rejected = load_preference_images(rows)
    assert chosen.shape == (1, 3, 16, 16) and chosen.dtype.is_floating_point is False
    assert int(chosen[0, 0, 0, 0]) == 200 and int(rejected[0, 0, 0, 0]) == 10


def test_every_bad_row_is_named_with_file_and_line(tmp_path):
    write_png(tmp_path / "ok.png")
    write_png(tmp_path / "big.png", size=(32, 32))
    lines = [
        {"prompt": "a red circle", "chosen": "ok.png", "rejected": "ok.png"},
        {"prompt": "a red circle", "chosen": "missing.png", "rejected": "ok.png"},
        {"prompt": "a red circle", "chosen": "ok.png"},
        {"prompt": "a red circle", "chosen": "big.png", "rejected": "ok.png"},
        {"chosen": "ok.png", "rejected": "ok.png"},
    ]
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ManifestError) as error:
        read_preferences(str(manifest), size=(16, 16))
    message = str(error.value)
    # the prompt check (line 5) runs first and stops at the manifest reader; fix it and the rest show
    assert "line 5" in message and "prompt" in message
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines[:4]))
    with pytest.raises(ManifestError) as error:
        read_preferences(str(manifest), size=(16, 16))
    message = str(error.value)
    assert f"{manifest}:2" in message and "missing.png does not exist" in message
    assert f"{manifest}:3" in message and 'no "rejected"' in message
    assert f"{manifest}:4" in message and "32x32" in message
    assert f"{manifest}:1" not in message


def test_only_jsonl_is_accepted(tmp_path):
    with pytest.raises(ManifestError, match="must be a .jsonl"):
        read_preferences(str(tmp_path / "pairs.txt"))


def test_shipped_toy_dataset_is_valid():
    rows = read_preferences("datasets/toy/preferences/pairs.jsonl", size=(IMAGE_SIZE, IMAGE_SIZE))
    assert len(rows) >= 64
