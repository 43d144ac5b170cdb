"""Ray rollout of the token family: two workers holding the tiny Janus policy produce the
in-process engine's token trajectories bitwise (tokens, log-probs, images, prompt ids), before
and after a LoRA weight sync — the same engine the flow families use, unchanged."""

from __future__ import annotations

import os

import pytest
import torch
from support import ray_rollout_setting

from genalign.preflight.load import load_config
from genalign.rollout.engine import LocalRolloutEngine
from genalign.rollout.token_batch import TokenTrajectoryBatch
from genalign.training import setup
from genalign.weights.lora import trainable_state_dict

pytestmark = pytest.mark.ray
RECIPE = "experiment/autoregressive/janus_pro/online_grpo_ocr"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def assert_token_batches_equal(a: TokenTrajectoryBatch, b: TokenTrajectoryBatch) -> None:
    assert isinstance(a, TokenTrajectoryBatch) and a.prompts == b.prompts and a.metadata == b.metadata
    for name in TokenTrajectoryBatch.ROW_TENSORS[:-1]:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    for name in ("input_ids", "attention_mask", "negative_input_ids", "negative_attention_mask"):
        assert torch.equal(getattr(a.condition, name), getattr(b.condition, name)), name


@pytest.fixture(scope="module")
def setting(tiny_janus_dir, tmp_path_factory):
    import ray

    from genalign.ray_session import init_ray

    prompts = tmp_path_factory.mktemp("prompts") / "train.txt"
    prompts.write_text('a sign that says "ray"\na red cube\na poster reading "sync"\na blue circle\n')
    cfg = load_config(
        RECIPE,
        [
            f"model.path={tiny_janus_dir}",
            f"data.manifest={prompts}",
            f"data.eval_manifest={prompts}",
            "model.device=cpu",
            "model.dtype=float32",
            "model.lora.rank=4",
            "model.lora.alpha=8",
            "rollout.height=32",
            "rollout.width=32",
            "rollout.n=2",
            "rollout.rollout_batch_size=2",
            "rollout.sample_batch_size=2",
            "actor.gradient_accumulation_steps=1",
            "reward.components.ocr=0.0",
            "reward.components.jpeg_compressibility=1.0",
            "/base/distributed=ray_rollout",
            "rollout.num_workers=2",
            "distributed.resources.rollout.num_workers=2",
        ],
    )
    init_ray(num_cpus=2, log_to_driver=False)
    policy, sampler, engine = ray_rollout_setting(cfg)
    yield cfg, policy, sampler, engine
    engine.close()
    ray.shutdown()


def test_two_workers_equal_in_process_bitwise_and_after_sync(setting):
    cfg, policy, sampler, engine = setting
    spec = setup.rollout_spec(cfg)
    for step in (1, 2):
        if step == 2:  # an "optimizer round": new LoRA weights, pushed as version 1
            with torch.no_grad():
                for param in filter(lambda p: p.requires_grad, policy.transformer.parameters()):
                    param.add_(0.5 * torch.randn_like(param))
            engine.sync(trainable_state_dict(policy.transformer), version=1)
        groups = sampler.sample(step)
        local = LocalRolloutEngine(policy).generate(groups, spec)
        assert_token_batches_equal(engine.generate(groups, spec), local)
