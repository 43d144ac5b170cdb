"""The whole loop for each video family (Wan 2.1, Cosmos-Predict2.5) on its tiny pipeline
(3-frame 32x32 videos), through its shipped recipe shrunk by `tiny_video_overrides`: rollout ->
per-frame and video-native rewards -> update -> checkpoint -> resume (bitwise) -> eval
artefacts (frame strips + GIF), and the exported LoRA loaded by the family's own diffusers
pipeline (`load_lora_weights`), changing what it renders."""

from __future__ import annotations

import pytest
import torch
from support import (
    VIDEO_RECIPES,
    assert_resumed_bitwise,
    pipeline_for_rendering,
    read_rows,
    render_tiny_video,
    tiny_video_overrides,
    train_recipe_in_process,
)

from genalign.preflight.load import load_config
from genalign.training.checkpoint_eval import evaluate_checkpoint
from genalign.training.trainer import Trainer


@pytest.fixture(scope="module", params=sorted(VIDEO_RECIPES))
def finished_run(request, tmp_path_factory):
    family = request.param
    model_dir = request.getfixturevalue(f"tiny_{family}_dir")
    out = tmp_path_factory.mktemp(f"{family}_run")
    trainer, initial = train_recipe_in_process(VIDEO_RECIPES[family], tiny_video_overrides(model_dir, out))
    assert trainer.policy.family == family
    return family, model_dir, out, trainer, initial


def test_video_run_trains_lora_and_writes_video_artefacts(finished_run):
    _, _, out, trainer, initial = finished_run
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert all(0.0 <= float(r["reward_temporal_consistency_mean"]) <= 1.0 for r in rows)
    changed = [k for k, v in trainer.policy.transformer.state_dict().items() if not torch.equal(v, initial[k])]
    assert changed and all("lora_" in k for k in changed)
    for step in (0, 2):
        assert sorted(p.name for p in (out / f"eval_epoch_{step}").iterdir()) == ["contact_sheet.png", "preview.gif"]
    assert (out / "checkpoint-final" / "lora" / "pytorch_lora_weights.safetensors").exists()


def test_resume_continues_bitwise(finished_run, tmp_path):
    family, model_dir, out, _, _ = finished_run
    resume = f"trainer.resume_from={out / 'checkpoint-1'}"
    Trainer(load_config(VIDEO_RECIPES[family], tiny_video_overrides(model_dir, tmp_path / "resumed", resume))).train()
    assert_resumed_bitwise(out, tmp_path / "resumed", 2)


def test_standalone_eval_of_the_checkpoint_writes_the_video_sheets(finished_run, tmp_path):
    _, _, out, _, _ = finished_run
    metrics = evaluate_checkpoint(str(out / "checkpoint-final"), str(tmp_path / "eval"), [])
    assert 0.0 <= metrics["eval_reward_temporal_consistency_mean"] <= 1.0
    assert any(path.name == "preview.gif" for path in (tmp_path / "eval").rglob("*"))


def test_exported_lora_loads_into_the_familys_pipeline_and_changes_the_video(finished_run):
    _, model_dir, out, trainer, _ = finished_run
    pipe = pipeline_for_rendering(trainer.policy.diffusers_pipeline, model_dir)
    before = render_tiny_video(pipe)
    pipe.load_lora_weights(out / "checkpoint-final" / "lora")
    assert not torch.allclose(before, render_tiny_video(pipe))
