"""`genalign eval` end to end on tiny models: every shipped benchmark's protocol on a tiny SD3
(GenEval with a tiny Mask2Former and CLIP, OCR with the real OCR engine, DrawBench with a tiny
CLIP scorer), every model form (a checkpoint, its exported LoRA inside it and copied out of it,
the base model), the results folder, and `genalign compare` over results and a run.

The checkpoint's LoRA export holds the EMA weights the checkpoint evaluates (eval.use_ema), so
the three forms of the trained model must give the same scores bitwise (same computation, same
order); the base model differs from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import tiny_overrides, train_recipe

from genalign.cli import main

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"
SMALL = [
    "eval.height=64",
    "eval.width=64",
    "eval.num_steps=2",
    "eval.max_prompts=2",
    "eval.samples_per_prompt=2",
    "eval.batch_size=4",
    "eval.guidance_scale=1.0",
]


@pytest.fixture(scope="module")
def trained(tiny_sd3_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_run") / "run"
    train_recipe(RECIPE, out, *tiny_overrides(tiny_sd3_dir, out, "trainer.num_steps=2", "trainer.save_every=0"))
    return out


@pytest.fixture(scope="module")
def tiny_scorers(tmp_path_factory):
    from published import save_tiny_clip, tiny_geneval_detector
    from transformers import Mask2FormerImageProcessorPil

    root = tmp_path_factory.mktemp("scorers")
    detector = tiny_geneval_detector(seed=0)
    detector.save_pretrained(root / "detector")
    Mask2FormerImageProcessorPil(size={"shortest_edge": 64, "longest_edge": 128}).save_pretrained(root / "detector")
    return {"detector": root / "detector", "clip": save_tiny_clip(root / "clip")}


def evaluate(model: str, benchmark: str, out: Path, *extra: str) -> dict:
    assert main(["eval", "--model", model, "--benchmark", benchmark, "--output-dir", str(out), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def sample_scores(out: Path) -> list[dict]:
    return [json.loads(line)["scores"] for line in (out / "samples.jsonl").read_text().splitlines()]


def test_every_form_of_the_trained_model_scores_alike_and_the_base_differs(trained, tiny_sd3_dir, tmp_path):
    checkpoint = trained / "checkpoint-final"
    evaluate(str(checkpoint), "run", tmp_path / "checkpoint", *SMALL)
    evaluate(str(checkpoint / "lora"), "run", tmp_path / "lora_inside", *SMALL)
    copied = shutil.copytree(checkpoint / "lora", tmp_path / "exported_lora")  # outside any checkpoint
    common = [
        "--config",
        RECIPE,
        f"model.path={tiny_sd3_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "/base/distributed=local",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
    ]
    evaluate(str(copied), "run", tmp_path / "lora_outside", *common, *SMALL)
    evaluate("base", "run", tmp_path / "base", *common, "model.lora.rank=4", "model.lora.alpha=8", *SMALL)
    scores = {name: sample_scores(tmp_path / name) for name in ("checkpoint", "lora_inside", "lora_outside", "base")}
    assert scores["checkpoint"] == scores["lora_inside"] == scores["lora_outside"]
    assert scores["base"] != scores["checkpoint"]
    summary = json.loads((tmp_path / "checkpoint" / "summary.json").read_text())
    assert summary["settings"]["weights"].startswith("EMA weights of step 2")
    files = {
        "samples.jsonl",
        "scores.csv",
        "summary.json",
        "summary.md",
        "settings.json",
        "contact_sheet.png",
        "report.html",
        "images",
    }
    assert files <= {p.name for p in (tmp_path / "checkpoint").iterdir()}
    assert (tmp_path / "checkpoint" / "images" / "00001" / "samples" / "0001.png").is_file()  # GenEval's layout


def test_geneval_ocr_and_drawbench_protocols_run_end_to_end(trained, tiny_scorers, tmp_path):
    checkpoint = str(trained / "checkpoint-final")
    geneval = evaluate(
        checkpoint,
        "geneval",
        tmp_path / "geneval",
        *SMALL,
        f"reward.kwargs.geneval_accuracy.detector_name={tiny_scorers['detector']}",
        f"reward.kwargs.geneval_accuracy.clip_name={tiny_scorers['clip']}",
    )
    table = geneval["table"]["geneval"]
    assert list(table["tags"]) == ["single_object"] and table["images"] == 4 and table["prompts"] == 2
    assert 0.0 <= table["overall"] <= 1.0
    options = geneval["settings"]["scorer_options"]["geneval_accuracy"]
    assert options["jpeg_quality"] is None and options["detector_channels"] == "rgb"  # GenEval's, not Flow-GRPO's
    assert geneval["settings"]["sampling"]["noise_seeds"] == "per_image_index"
    rows = [json.loads(line) for line in (tmp_path / "geneval" / "samples.jsonl").read_text().splitlines()]
    assert rows[0]["seed"] == rows[2]["seed"] != rows[1]["seed"]  # image k of every prompt shares its noise

    ocr = evaluate(checkpoint, "ocr", tmp_path / "ocr", *SMALL)["table"]["ocr"]
    assert ocr["normalised_edit_distance"] == pytest.approx(1 - ocr["accuracy"]) and ocr["images"] == 4

    drawbench = evaluate(
        checkpoint,
        "drawbench",
        tmp_path / "drawbench",
        *SMALL,
        "--scorers=clip_score",
        f"reward.kwargs.clip_score.model_name={tiny_scorers['clip']}",
    )["table"]
    assert list(drawbench["scorers"]) == ["clip_score"] and set(drawbench["scorers"]["clip_score"]["categories"]) == {
        "Colors"
    }

    page = tmp_path / "compare.html"
    again = shutil.copytree(tmp_path / "ocr", tmp_path / "copy" / "ocr")  # a second evaluation of the same prompts
    assert (
        main(
            [
                "compare",
                str(tmp_path / "ocr"),
                str(again),
                str(tmp_path / "drawbench"),
                str(trained),
                "--output",
                str(page),
            ]
        )
        == 0
    )
    html = page.read_text()
    assert 'id="numbers"' in html and "ocr_accuracy" in html and "clip_score_mean" in html
    assert 'id="curve-eval_reward_mean"' in html and 'id="sheets"' in html
    # the 4 images both OCR results share, in two columns (DrawBench shares none of their prompts)
    assert 'id="images"' in html and html.count('style="width:160px') == 8


def test_bad_model_and_benchmark_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["eval", "--model", str(tmp_path / "empty"), "--benchmark", "toy"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["eval", "--model", "base", "--benchmark", "nope"]) == 2
    assert "--benchmark 'nope'" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["eval", "--model", "base", "--benchmark", "toy", "--output-dir", str(tmp_path / "file")]) == 2
    assert "--output-dir: " in capsys.readouterr().err
