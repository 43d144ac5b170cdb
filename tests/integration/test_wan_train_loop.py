"""The whole loop on the tiny Wan pipeline (3-frame 32x32 videos): rollout -> per-frame and
video-native rewards -> update -> checkpoint -> resume (bitwise) -> eval artefacts (frame
strips + GIF), and the exported LoRA loaded by `WanPipeline.load_lora_weights`."""

from __future__ import annotations

import pytest
import torch

from genalign.config.loader import load_config
from genalign.evaluation.standalone import evaluate_checkpoint
from genalign.training.trainer import Trainer
from support import WAN_RECIPE, assert_resumed_bitwise, read_rows, tiny_wan_overrides


@pytest.fixture(scope="module")
def finished_run(tiny_wan_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("wan_run")
    trainer = Trainer(load_config(WAN_RECIPE, tiny_wan_overrides(tiny_wan_dir, out)))
    initial = {k: v.clone() for k, v in trainer.policy.transformer.state_dict().items()}
    trainer.train()
    return out, trainer, initial


def test_video_run_trains_lora_and_writes_video_artefacts(finished_run):
    out, trainer, initial = finished_run
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert all(0.0 <= float(r["reward_temporal_consistency_mean"]) <= 1.0 for r in rows)
    changed = [k for k, v in trainer.policy.transformer.state_dict().items() if not torch.equal(v, initial[k])]
    assert changed and all("lora_" in k for k in changed)
    for step in (0, 2):
        assert sorted(p.name for p in (out / f"eval_epoch_{step}").iterdir()) == ["contact_sheet.png", "preview.gif"]
    assert (out / "checkpoint-final" / "lora" / "pytorch_lora_weights.safetensors").exists()


def test_resume_continues_bitwise(finished_run, tiny_wan_dir, tmp_path):
    out, _, _ = finished_run
    Trainer(load_config(WAN_RECIPE, tiny_wan_overrides(tiny_wan_dir, tmp_path / "resumed",
                                                       f"trainer.resume_from={out / 'checkpoint-1'}"))).train()
    assert_resumed_bitwise(out, tmp_path / "resumed", 2)


def test_standalone_eval_of_the_checkpoint_writes_the_video_sheets(finished_run, tmp_path):
    out, _, _ = finished_run
    metrics = evaluate_checkpoint(str(out / "checkpoint-final"), str(tmp_path / "eval"), [])
    assert 0.0 <= metrics["eval_reward_temporal_consistency_mean"] <= 1.0
    assert any(path.name == "preview.gif" for path in (tmp_path / "eval").rglob("*"))


def test_exported_lora_loads_into_the_wan_pipeline_and_changes_the_video(finished_run, tiny_wan_dir):
    from diffusers import WanPipeline

    out, _, _ = finished_run

    def render(pipe):
        return pipe("a red fox running", num_inference_steps=2, height=32, width=32, num_frames=3,
                    guidance_scale=1.0, max_sequence_length=16, generator=torch.Generator().manual_seed(0),
                    output_type="pt").frames

    pipe = WanPipeline.from_pretrained(tiny_wan_dir)
    before = render(pipe)
    pipe.load_lora_weights(out / "checkpoint-final" / "lora")
    assert not torch.allclose(before, render(pipe))
