"""Source images in prompt manifests: resolved against the manifest's folder, checked before any
model loads (missing, unreadable, wrong size, a changing count: one line naming the file and the
row), carried in each row's metadata, read back as uint8 pixels; the shipped editing set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from genalign.data.prompts import PACKAGED_DATASETS, ManifestError, load_manifest
from genalign.data.source_images import SOURCE_KEY, load_sources, source_count, sources_of


def picture(path: Path, value: int, size: tuple[int, int] = (16, 16)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), value, dtype=np.uint8)).save(path)
    return path


def manifest(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_paths_resolve_against_the_manifest_folder_and_become_metadata(tmp_path):
    picture(tmp_path / "images" / "a.png", 10)
    picture(tmp_path / "images" / "b.png", 20)
    path = manifest(
        tmp_path / "edits.jsonl",
        [
            {"prompt": "make it red", "source_image": "images/a.png", "target": "red"},
            {"prompt": "make it blue", "source_images": ["images/b.png"]},
        ],
    )
    examples = load_manifest(path, "data.manifest", source_size=(16, 16))
    assert [sources_of(e.metadata) for e in examples] == [
        (str(tmp_path / "images" / "a.png"),),
        (str(tmp_path / "images" / "b.png"),),
    ]
    assert examples[0].metadata == {"target": "red", SOURCE_KEY: [str(tmp_path / "images" / "a.png")]}
    pixels = load_sources([e.metadata for e in examples])
    assert pixels.dtype == torch.uint8 and pixels.shape == (2, 1, 3, 16, 16)
    assert pixels[0].unique().tolist() == [10] and pixels[1].unique().tolist() == [20]


def test_text_only_rows_carry_no_sources(tmp_path):
    examples = load_manifest(manifest(tmp_path / "p.jsonl", [{"prompt": "a cat"}]))
    assert sources_of(examples[0].metadata) == () and load_sources([examples[0].metadata]) is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "x", "source_image": "missing.png"}, r'"source_image": .*missing\.png does not exist'),
        ({"prompt": "x", "source_image": "broken.png"}, r'"source_image": .*broken\.png cannot be read as an image'),
        ({"prompt": "x", "source_image": "big.png"}, r'"source_image": .*big\.png is 32x16, the rollout is 16x16'),
        ({"prompt": "x", "source_image": "notes.txt"}, r'"source_image": notes\.txt is not an image file'),
        ({"prompt": "x", "source_images": []}, r'has a "source_images" that is not a non-empty list'),
        ({"prompt": "x", "source_image": "ok.png", "source_images": ["ok.png"]}, r'has both "source_image" and'),
    ],
)
def test_a_bad_source_is_one_line_naming_the_file_and_row(tmp_path, row, message):
    picture(tmp_path / "ok.png", 1)
    picture(tmp_path / "big.png", 1, size=(32, 16))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    (tmp_path / "notes.txt").write_text("hello")
    path = manifest(tmp_path / "edits.jsonl", [{"prompt": "fine", "source_image": "ok.png"}, row])
    with pytest.raises(ManifestError, match=rf"^data\.manifest: line 2 of {path} {message}"):
        load_manifest(path, "data.manifest", source_size=(16, 16))


def test_every_row_carries_the_same_number_of_sources(tmp_path):
    picture(tmp_path / "a.png", 1)
    path = manifest(tmp_path / "m.jsonl", [{"prompt": "x", "source_image": "a.png"}, {"prompt": "y"}])
    with pytest.raises(ManifestError, match=r"line 2 of .* has 0 source image\(s\), the manifest's first row 1"):
        load_manifest(path)


def test_json_lists_name_the_item(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"prompt": "x", "source_image": "gone.png"}]))
    with pytest.raises(ManifestError, match=r"item \[0\] of .*m\.json \"source_image\": .*gone\.png does not exist"):
        load_manifest(str(path))


def test_a_batch_mixing_counts_or_sizes_is_refused(tmp_path):
    a, b = picture(tmp_path / "a.png", 1), picture(tmp_path / "b.png", 1, size=(8, 8))
    with pytest.raises(ValueError, match="different numbers of source images"):
        source_count([{SOURCE_KEY: [str(a)]}, {}])
    with pytest.raises(ValueError, match="different sizes"):
        load_sources([{SOURCE_KEY: [str(a)]}, {SOURCE_KEY: [str(b)]}])


def load_builder():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("edit_build", PACKAGED_DATASETS / "edit" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["edit_build"] = module
    spec.loader.exec_module(module)
    return module


def test_shipped_editing_set_is_a_fresh_build_and_loads_at_the_recipes_size():
    assert load_builder().main(["--check"]) == 0
    for name, count in (("train.jsonl", 16), ("test.jsonl", 8)):
        examples = load_manifest(str(PACKAGED_DATASETS / "edit" / name), source_size=(512, 512))
        assert len(examples) == count and all(len(sources_of(e.metadata)) == 1 for e in examples)
        assert all(e.metadata["target"] != e.metadata["source"] for e in examples)


def test_check_flags_a_stale_image(tmp_path):
    builder = load_builder()
    assert builder.main(["--out", str(tmp_path), "--size", "32"]) == 0
    assert builder.main(["--check", "--out", str(tmp_path), "--size", "32"]) == 0
    picture(tmp_path / "images" / "test_00.png", 0, size=(32, 32))
    assert builder.main(["--check", "--out", str(tmp_path), "--size", "32"]) == 1
