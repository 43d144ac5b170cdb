"""model.offload_text_encoders: the text encoders wait on the CPU and come to the device only
while a step's prompts are encoded; trajectories are unchanged (on CPU the device is the CPU,
so this checks the wiring and the equality; tests/unit/rollout/test_place_policy.py moves
them to a real other device)."""

import pytest
import torch
from support import tiny_overrides

from genalign.config.errors import ConfigError
from genalign.data.prompts import load_manifest
from genalign.data.sampler import PromptSampler
from genalign.preflight.load import load_config
from genalign.rollout.engine import LocalRolloutEngine
from genalign.training import setup

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"


def _rollout(tiny_sd3_dir, tmp_path, *extra):
    cfg = load_config(RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path, "rollout.guidance_scale=4.5", *extra))
    torch.manual_seed(cfg.trainer.seed)
    policy = setup.build_policy(cfg)
    groups = PromptSampler(load_manifest(cfg.data.manifest), 2, 2, cfg.trainer.seed).sample(1)
    return policy, LocalRolloutEngine(policy).generate(groups, setup.rollout_spec(cfg))


def test_offloaded_encoders_sample_the_same_trajectories(tiny_sd3_dir, tmp_path, monkeypatch):
    policy, offloaded = _rollout(tiny_sd3_dir, tmp_path, "model.offload_text_encoders=true")
    assert [id(e) for e in policy.offloaded_text_encoders] == [id(e) for e in policy.text_encoders]  # CLIP-L, -G, T5
    _, resident = _rollout(tiny_sd3_dir, tmp_path)
    assert torch.equal(offloaded.latents, resident.latents) and torch.equal(offloaded.log_probs, resident.log_probs)
    assert torch.equal(offloaded.condition.embeds, resident.condition.embeds)


def test_families_without_text_encoders_refuse_it():
    with pytest.raises(ConfigError, match="model.offload_text_encoders=true: model.family=toy has no separate text"):
        load_config(None, ["model.offload_text_encoders=true"])
