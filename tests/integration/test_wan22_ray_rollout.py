"""Wan 2.2's two experts under a real local Ray rollout worker (tiny T2V-A14B from its published
configs): the weight sync carries every trained expert's tensors, and a rollout on the worker
after a sync runs the updated expert, bit for bit as the in-process engine does.

The tiny recipe samples 3 steps at shift 3: step 0 (σ = 1, t = 1000) runs the high-noise
`transformer`, steps 1 and 2 (t ≈ 857, 600 < boundary 875) the low-noise `transformer_2`. So
an update of the low-noise expert alone leaves the trajectory's first step unchanged and moves
its end; one of the high-noise expert moves everything after the start. One worker, one module
Ray session (2 CPUs, loopback)."""

from __future__ import annotations

import os

import pytest
import torch
from support import ray_rollout_setting, tiny_video_overrides

from genalign.preflight.load import load_config
from genalign.rollout.engine import LocalRolloutEngine
from genalign.training import setup
from genalign.weights.lora import trainable_state_dict

pytestmark = pytest.mark.ray
RECIPE = "experiment/diffusion/wan_2_2/online_grpo_pickscore"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from genalign.ray_session import init_ray

    init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


def setting(model_dir, tmp_path, experts: str):
    cfg = load_config(
        RECIPE,
        tiny_video_overrides(
            model_dir,
            tmp_path,
            f"model.experts={experts}",
            "/base/distributed=ray_rollout",
            "rollout.num_workers=1",
            "distributed.resources.rollout.num_workers=1",
            "model.gradient_checkpointing=false",
            *("rollout.sde_window.lo=0", "rollout.sde_window.hi=3", "rollout.sde_window.size=3"),  # fits 3 steps
        ),
    )
    return cfg, *ray_rollout_setting(cfg)


def nudge(policy, expert: str, seed: int) -> None:
    """An "optimizer round" that moves only `expert`'s trainable tensors."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in getattr(policy.transformer, expert).parameters():
            if param.requires_grad:
                param.add_(0.05 * torch.randn(param.shape, generator=generator))


def assert_same_rollout(remote, local) -> None:
    for name in ("latents", "log_probs", "images"):
        assert torch.equal(getattr(remote, name), getattr(local, name)), name


@pytest.mark.parametrize(
    "experts,updates",
    [("both", ["transformer_2", "transformer"]), ("high_noise", ["transformer"])],
)
def test_the_sync_carries_the_trained_experts_and_the_worker_samples_with_the_update(
    tiny_wan22_dirs, ray_session, tmp_path, experts, updates
):
    cfg, policy, sampler, engine = setting(tiny_wan22_dirs["a14b"], tmp_path, experts)
    try:
        state = trainable_state_dict(policy.transformer)
        trained = {"both": {"transformer", "transformer_2"}, "high_noise": {"transformer"}}[experts]
        assert {name.split(".")[0] for name in state} == trained  # every trained expert's tensors, only theirs
        assert all("lora_" in name for name in state)
        spec = setup.rollout_spec(cfg)
        groups = sampler.sample(1)
        before = engine.generate(groups, spec)
        assert_same_rollout(before, LocalRolloutEngine(policy).generate(groups, spec))
        for version, expert in enumerate(updates, start=1):
            nudge(policy, expert, seed=version)
            metrics = engine.sync(trainable_state_dict(policy.transformer), version=version)
            payload = sum(t.numel() * t.element_size() for t in trainable_state_dict(policy.transformer).values())
            assert metrics["sync_bytes"] == payload  # one worker: both experts' tensors (or the one's) once
            after = engine.generate(groups, spec)
            assert_same_rollout(after, LocalRolloutEngine(policy).generate(groups, spec))
            # latents [B, T + 1, ...]: index 1 is after step 0, the high-noise expert's
            first_step_moved = not torch.equal(after.latents[:, 1], before.latents[:, 1])
            assert first_step_moved == (expert == "transformer"), expert
            assert not torch.equal(after.latents[:, -1], before.latents[:, -1])  # the worker used the update
            before = after
    finally:
        engine.close()
