"""Flow-matching SFT through the whole loop on the toy model, from the image dataset and from the
best of each rollout group: the run directory contract, its columns, and bitwise resume."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file
from support import TIMING_COLUMNS, read_rows, toy_loop_overrides

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

RECIPE = "experiment/toy/shapes_sft"
BEST_OF_N = ["algorithm.sft.source=best_of_n", "data.image_manifest=null", "rollout.n=2", "rollout.noise_level=0"]
RUNS = {  # name -> (overrides, columns the run must log)
    "dataset": (["rollout.rollout_batch_size=4", "rollout.n=1"], ["images", "sft_sigma_min", "sft_sigma_max"]),
    # two draws per sample with the "mode" density and the velocity target (precondition off)
    "dataset_mode": (
        [
            "rollout.rollout_batch_size=4",
            "rollout.n=1",
            "algorithm.sft.draws_per_sample=2",
            "algorithm.sft.weighting_scheme=mode",
            "algorithm.sft.precondition_outputs=false",
        ],
        ["images"],
    ),
    "best_of_n": (BEST_OF_N, ["reward_mean", "zero_std_ratio"]),
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def finished(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    Trainer(load_config(RECIPE, toy_loop_overrides(out, *RUNS[request.param][0]))).train()
    return request.param, out


def test_run_directory_and_columns(finished):
    name, out = finished
    for artefact in ["config.yaml", "metrics.csv", "eval_metrics.csv", "checkpoint-1", "checkpoint-final"]:
        assert (out / artefact).exists(), artefact
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    for column in RUNS[name][1] + ["loss", "grad_norm", "optimizer_steps", "policy_loss"]:
        assert column in rows[0], column
    assert "parity_max_abs_log_prob_diff" not in rows[0]  # no log-probs to check
    assert all(float(r["optimizer_steps"]) >= 1 for r in rows)
    assert not (out / "checkpoint-final" / "algorithm.safetensors").exists()  # no algorithm state
    if name != "best_of_n":
        assert "reward_mean" not in rows[0]  # nothing is scored in training
        assert [float(r["images"]) for r in rows] == [4.0, 4.0, 4.0]


def test_resume_continues_bitwise(finished, tmp_path):
    name, out = finished
    extra = RUNS[name][0]
    Trainer(
        load_config(RECIPE, toy_loop_overrides(tmp_path, *extra, f"trainer.resume_from={out / 'checkpoint-2'}"))
    ).train()
    original, resumed = read_rows(out / "metrics.csv"), read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in resumed] == ["3"]
    for key, value in original[2].items():
        if key not in TIMING_COLUMNS:
            assert resumed[0].get(key, "") == value, key
    a = load_file(str(out / "checkpoint-final" / "trainable.safetensors"))
    b = load_file(str(tmp_path / "checkpoint-final" / "trainable.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_sd3_recipe_trains_a_tiny_sd3_from_an_image_dataset(tiny_sd3_dir, tmp_path):
    """The SD3.5 LoRA SFT recipe on the tiny random SD3: the images go through the VAE
    (`encode_images`), the LoRA moves, and the run writes its columns."""
    import json

    import numpy as np
    from PIL import Image
    from support import tiny_overrides

    rng = np.random.default_rng(0)
    rows = []
    for index in range(4):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / f"{index}.png")
        rows.append({"prompt": f"A sign that says {index}", "image": f"{index}.png"})
    manifest = tmp_path / "images.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "run"
    extra = [f"data.image_manifest={manifest}", "algorithm.sft.source=dataset", "trainer.num_steps=2", "eval.every=0"]
    Trainer(load_config("experiment/diffusion/sd3_5/sft_lora", tiny_overrides(tiny_sd3_dir, out, *extra))).train()
    rows_logged = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows_logged] == ["1", "2"] and float(rows_logged[-1]["images"]) == 2.0
    adapter = load_file(str(out / "checkpoint-final" / "trainable.safetensors"))
    assert any(v.abs().max() > 0 for k, v in adapter.items() if "lora_B" in k)
