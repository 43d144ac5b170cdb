"""The committed GenEval prompt sets equal a fresh build of genalign/datasets/geneval/build.py and are valid rows."""

import collections
import importlib.util
import sys

from genalign.data.prompts import PACKAGED_DATASETS, load_manifest
from genalign.rewards.geneval import COLORS, POSITIONS, TAGS, check_metadata

GENEVAL_DIR = PACKAGED_DATASETS / "geneval"


def load_builder():
    spec = importlib.util.spec_from_file_location("geneval_build", GENEVAL_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["geneval_build"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_files_equal_a_fresh_build(tmp_path):
    builder = load_builder()
    assert builder.main(["--out", str(tmp_path)]) == 0
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (GENEVAL_DIR / name).read_bytes(), "stale: run build.py"
    (tmp_path / "test.jsonl").write_text("stale\n")
    assert builder.main(["--check", "--out", str(tmp_path)]) == 1


def test_rows_are_geneval_metadata_and_splits_are_disjoint():
    builder = load_builder()
    assert builder.COLORS == list(COLORS) and builder.POSITIONS == list(POSITIONS) and len(builder.CLASSES) == 80
    prompts = {}
    for name, size in (("train.jsonl", 10000), ("test.jsonl", 2212)):
        examples = load_manifest(str(GENEVAL_DIR / name))
        assert len(examples) == size
        for index, example in enumerate(examples):
            check_metadata(example.metadata, index, example.prompt, set(builder.CLASSES))
            if example.metadata["tag"] == "counting":
                (clause,), (exclude,) = example.metadata["include"], example.metadata["exclude"]
                assert exclude == {"class": clause["class"], "count": clause["count"] + 1}
        prompts[name] = {example.prompt for example in examples}
        tags = collections.Counter(example.metadata["tag"] for example in examples)
        if name == "test.jsonl":
            assert set(tags) == set(TAGS) and max(tags.values()) - min(tags.values()) <= 1
        else:
            assert "single_object" not in tags and tags["position"] > tags["counting"] > tags["color_attr"]
    assert not prompts["train.jsonl"] & prompts["test.jsonl"]
