"""The benchmark prompt sets are what their build scripts make from their sources: GenEval's
553-prompt suite byte for byte (its sha256 is the published file's), DrawBench's 200 prompts with
their categories and the contract's 192/8 split."""

from __future__ import annotations

import subprocess
import sys

from genalign.data.prompts import PACKAGED_DATASETS, load_manifest


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PACKAGED_DATASETS / script), "--check"], capture_output=True, text=True, timeout=120
    )


def test_geneval_benchmark_file_is_the_published_suite():
    done = run("geneval/build_benchmark.py")
    assert done.returncode == 0, done.stderr
    tags = [e.metadata["tag"] for e in load_manifest("datasets/geneval/evaluation_metadata.jsonl")]
    assert {t: tags.count(t) for t in set(tags)} == {
        "single_object": 80,
        "two_object": 99,
        "counting": 80,
        "colors": 94,
        "position": 100,
        "color_attr": 100,
    }


def test_drawbench_files_are_current_and_split_192_8():
    done = run("drawbench/build.py")
    assert done.returncode == 0, done.stderr
    every = [e.prompt for e in load_manifest("datasets/drawbench/prompts.jsonl")]
    train = [e.prompt for e in load_manifest("datasets/drawbench/train_192.txt")]
    test = [e.prompt for e in load_manifest("datasets/drawbench/test_8.txt")]
    assert len(every) == 200 and len(train) == 192 and len(test) == 8
    assert not set(train) & set(test) and set(train) | set(test) == set(every)
