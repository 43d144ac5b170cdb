"""The committed OCR prompt lists equal a fresh build of genalign/datasets/ocr/build.py."""

import importlib.util
import sys

from genalign.data.prompts import PACKAGED_DATASETS, load_manifest
from genalign.rewards.ocr import quoted_target

OCR_DIR = PACKAGED_DATASETS / "ocr"


def load_builder():
    spec = importlib.util.spec_from_file_location("ocr_build", OCR_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ocr_build"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_committed_files_equal_a_fresh_build(tmp_path):
    builder = load_builder()
    assert builder.main(["--out", str(tmp_path)]) == 0
    for name in ("train.txt", "test.txt"):
        assert (tmp_path / name).read_bytes() == (OCR_DIR / name).read_bytes(), (
            "stale: run python genalign/datasets/ocr/build.py"
        )
    assert builder.main(["--check"]) == 0


def test_check_flags_a_stale_file(tmp_path):
    builder = load_builder()
    builder.main(["--out", str(tmp_path)])
    (tmp_path / "test.txt").write_text("stale\n")
    assert builder.main(["--check", "--out", str(tmp_path)]) == 1


def test_every_line_has_one_quoted_target_and_splits_are_disjoint():
    targets = {}
    for name, size in (("train.txt", 2000), ("test.txt", 200)):
        prompts = [example.prompt for example in load_manifest(str(OCR_DIR / name))]
        assert len(prompts) == size
        for prompt in prompts:
            assert prompt.count('"') == 2 and prompt.endswith('"'), prompt
            assert prompt.startswith(("A ", "An ")) and ' that says "' in prompt, prompt
        targets[name] = [quoted_target(prompt) for prompt in prompts]  # the reward's own normalisation
        assert len(set(targets[name])) == size, f"a target repeats within {name}"
    assert not set(targets["train.txt"]) & set(targets["test.txt"])


def test_prompts_are_diverse():
    builder = load_builder()
    prompts = [example.prompt for example in load_manifest(str(OCR_DIR / "train.txt"))]
    used = {carrier.noun for carrier in builder.CARRIERS if any(f" {carrier.noun} " in p for p in prompts)}
    assert len(used) == len(builder.CARRIERS)
    assert len({p.split('"')[0] for p in prompts}) > 1000  # scene descriptions rarely repeat
    assert any(char.isdigit() for p in prompts for char in p.split('"')[1])
