"""Image–prompt manifests of flow-matching SFT: every row's file checked before any model loads,
one line per bad row naming the manifest and line; the shipped toy dataset is valid and fresh."""

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from genalign.data.preferences import read_image_prompts
from genalign.data.prompts import PACKAGED_DATASETS, ManifestError
from genalign.data.toy_shapes import IMAGE_SIZE, parse_prompt


def write_png(path, size=(16, 16)):
    Image.fromarray(np.full((*size, 3), 9, dtype=np.uint8)).save(path)


def test_rows_resolve_relative_to_the_manifest(tmp_path):
    (tmp_path / "img").mkdir()
    write_png(tmp_path / "img" / "a.png")
    manifest = tmp_path / "images.jsonl"
    manifest.write_text(json.dumps({"prompt": "a red circle", "image": "img/a.png", "note": 1}) + "\n")
    [row] = read_image_prompts(str(manifest), size=(16, 16))
    assert (row.prompt, row.image, row.source) == ("a red circle", tmp_path / "img" / "a.png", f"{manifest}:1")


def test_missing_unreadable_and_wrong_size_rows_are_each_named(tmp_path):
    write_png(tmp_path / "ok.png")
    write_png(tmp_path / "big.png", size=(32, 32))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    lines = [
        {"prompt": "a red circle", "image": "ok.png"},
        {"prompt": "a red circle", "image": "missing.png"},
        {"prompt": "a red circle", "image": "broken.png"},
        {"prompt": "a red circle", "image": "big.png"},
        {"prompt": "a red circle"},
    ]
    manifest = tmp_path / "images.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ManifestError) as error:
        read_image_prompts(str(manifest), size=(16, 16))
    message = str(error.value)
    assert message.startswith(f"data.image_manifest: {manifest} has 4 bad row(s):")
    reported = message.splitlines()[1:]
    assert len(reported) == 4  # one line per bad row
    assert f"{manifest}:2" in reported[0] and "missing.png does not exist" in reported[0]
    assert f"{manifest}:3" in reported[1] and "cannot be read as an image" in reported[1]
    assert f"{manifest}:4" in reported[2] and "32x32" in reported[2]
    assert f"{manifest}:5" in reported[3] and 'no "image"' in reported[3]


def test_the_config_check_reports_a_bad_manifest_before_any_model_loads(tmp_path):
    from genalign.preflight.files import file_problems
    from genalign.preflight.load import load_config

    manifest = tmp_path / "images.jsonl"
    manifest.write_text(json.dumps({"prompt": "a red circle", "image": "gone.png"}) + "\n")
    cfg = load_config("experiment/toy/shapes_sft", [f"data.image_manifest={manifest}"])
    [problem] = [p for p in file_problems(cfg, output_dir=False) if "image_manifest" in p]
    assert f"{manifest}:1" in problem and "gone.png does not exist" in problem


def test_shipped_toy_dataset_is_valid_and_shows_the_prompted_shape():
    rows = read_image_prompts("datasets/toy/sft/images.jsonl", size=(IMAGE_SIZE, IMAGE_SIZE))
    assert len(rows) == 96 and len({row.prompt for row in rows}) == 16
    assert all(parse_prompt(row.prompt).shape for row in rows)


def test_shipped_toy_dataset_is_what_its_build_script_writes():
    build = PACKAGED_DATASETS / "toy" / "sft" / "build.py"
    result = subprocess.run([sys.executable, str(build), "--check"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
