"""Shipped benchmarks compose into valid configs, their prompt sets load with the metadata their
scorers need, the run's own evaluation is a benchmark, and a user benchmark file's mistakes name
the file."""

from __future__ import annotations

import json

import pytest

from genalign.data.prompts import load_manifest
from genalign.evaluation.benchmarks import BENCHMARKS, resolve_benchmark, run_benchmark
from genalign.preflight.load import load_config
from genalign.rewards.geneval import GenEvalOptions


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_shipped_benchmark_composes_and_its_prompts_load(name):
    benchmark = BENCHMARKS[name]
    overrides = [f"{key}={json.dumps(value)}" for key, value in benchmark.protocol.items()]
    cfg = load_config(None, overrides + [f"data.eval_manifest={benchmark.manifest}"])
    assert cfg.data.eval_manifest == benchmark.manifest
    assert load_manifest(benchmark.manifest) and benchmark.sources


def test_geneval_benchmark_is_genevals_protocol():
    geneval = BENCHMARKS["geneval"]
    examples = load_manifest(geneval.manifest)
    assert len(examples) == 553
    assert GenEvalOptions().manifest_problems(examples) == []
    assert (
        geneval.protocol["eval.samples_per_prompt"] == 4 and geneval.protocol["eval.noise_seeds"] == "per_image_index"
    )
    # GenEval reads lossless PNGs in true RGB: neither Flow-GRPO's JPEG nor its channel swap
    assert geneval.reward_kwargs["geneval_accuracy"] == {"jpeg_quality": None, "detector_channels": "rgb"}


def test_drawbench_carries_its_categories():
    examples = load_manifest(BENCHMARKS["drawbench"].manifest)
    assert len(examples) == 200 and len({e.metadata["category"] for e in examples}) == 11


def test_the_runs_own_evaluation_is_a_benchmark():
    cfg = load_config(None)
    benchmark = resolve_benchmark("run", cfg)
    assert benchmark == run_benchmark(cfg)
    assert benchmark.groups["eval_reward"] == {"toy_shape": 1.0} and benchmark.groups["gold"] == {
        "toy_shape_judge": 1.0
    }
    assert "quality_toy_patch_pattern" in benchmark.groups
    manifest = resolve_benchmark("datasets/toy/train.txt", cfg)
    assert manifest.manifest == "datasets/toy/train.txt" and manifest.groups == benchmark.groups


def test_user_benchmark_file_and_its_mistakes(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text(
        "manifest: datasets/toy/test.txt\nscorers: [toy_shape, toy_shape_judge]\nprotocol: {eval.num_steps: 4}\n"
    )
    benchmark = resolve_benchmark(str(good), load_config(None))
    assert benchmark.name == "mine" and benchmark.groups == {
        "toy_shape": {"toy_shape": 1.0},
        "toy_shape_judge": {"toy_shape_judge": 1.0},
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("manifest: datasets/toy/test.txt\nscorer: [toy_shape]\n")
    with pytest.raises(ValueError, match="bad.yaml: needs manifest and scorers.*unknown keys: \\['scorer'\\]"):
        resolve_benchmark(str(bad), load_config(None))
    with pytest.raises(ValueError, match="--benchmark 'nope'"):
        resolve_benchmark("nope", load_config(None))


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_a_benchmarks_protocol_leaves_out_the_keys_a_family_does_not_read(name):
    """A protocol written for flow models sets eval.num_steps; Janus-Pro draws image tokens and
    refuses the key, so `genalign eval` applies the rest of the protocol only."""
    from genalign.models.spec import family_spec
    from genalign.training.model_eval import benchmark_overrides

    benchmark = BENCHMARKS[name]
    janus, sd3 = family_spec("janus"), family_spec("sd3")
    assert "eval.num_steps" in benchmark.protocol
    kept = benchmark_overrides(benchmark, janus)
    assert not any(item.startswith("eval.num_steps=") for item in kept)
    assert len(kept) == len(benchmark_overrides(benchmark, sd3)) - 1
    cfg = load_config("experiment/autoregressive/janus_pro/online_grpo_ocr", kept, check_files=False)
    assert cfg.eval.num_steps == type(cfg.eval)().num_steps and cfg.data.eval_manifest == benchmark.manifest
