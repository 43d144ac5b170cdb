"""Colocated Ray rollout (ray_rollout_colocated_single_gpu): never two copies on one device.

What is checked, on CPU: the placements each side makes. The trainer's policy and the rollout
worker's record every `place_policy` move with a CLOCK_MONOTONIC time (one clock for every
process of the machine); merged, the timeline must never have both sides "on the device".
On a CPU machine the device *is* the CPU, so no bytes move here: the test checks the phase
logic (who parks when, which modules), not a GPU's memory counter. Trajectories must stay
bitwise equal to the in-process engine's across the round trips.
"""

from __future__ import annotations

import os

import pytest
import torch
from support import ray_overrides

from genalign.algorithms.registry import algorithm_class
from genalign.data.prompts import load_manifest
from genalign.data.sampler import PromptSampler
from genalign.preflight.load import load_config
from genalign.rollout.engine import LocalRolloutEngine
from genalign.rollout.ray_engine import RayRolloutEngine
from genalign.training import setup
from genalign.weights.lora import trainable_state_dict
from genalign.weights.reference import REFERENCE_ATTRIBUTE, ReferencePolicy

pytestmark = pytest.mark.ray
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
FROZEN_AND_DENOISER = {"transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"}


def both_on_device(events: list[tuple[float, str, str]]) -> list[float]:
    """Times at which the trainer and a worker are both placed on the device. `events` are
    (time, side, "device" | "cpu"); a side is on the device from a "device" event to its next
    "cpu" event."""
    where: dict[str, str] = {}
    overlaps = []
    for when, side, place in sorted(events):
        where[side] = place
        if sum(1 for p in where.values() if p == "device") > 1:
            overlaps.append(when)
    return overlaps


def test_overlap_checker_sees_an_overlap():
    assert both_on_device([(0, "trainer", "device"), (1, "worker", "device"), (2, "trainer", "cpu")]) == [1]
    assert both_on_device([(0, "trainer", "device"), (1, "trainer", "cpu"), (2, "worker", "device")]) == []


@pytest.mark.parametrize("train_mode", ["lora", "full"])
def test_trainer_and_worker_never_both_on_the_device(tiny_sd3_dir, tmp_path, train_mode):
    """`full`: a full fine-tune with a KL term, whose frozen reference copy (built as the
    trainer builds it) parks with the trainer's modules."""
    import ray

    from genalign.ray_session import init_ray

    prompts = tmp_path / "train.txt"
    prompts.write_text('a sign that says "ray"\na red cube\n')
    cfg = load_config(
        "experiment/diffusion/sd3_5/online_grpo_ocr",
        ray_overrides(
            tiny_sd3_dir,
            prompts,
            "/base/distributed=ray_rollout_colocated_single_gpu",
            f"model.train_mode={train_mode}",
            "algorithm.kl_beta=0.04",
        ),
    )
    assert cfg.distributed.colocated and algorithm_class(cfg).reference_kind(cfg.algorithm) == "frozen"
    torch.manual_seed(cfg.trainer.seed)
    policy = setup.build_policy(cfg)
    ReferencePolicy(policy, cfg.model.train_mode)
    trainer_modules = FROZEN_AND_DENOISER | ({REFERENCE_ATTRIBUTE} if train_mode == "full" else set())
    trained = [p for p in policy.transformer.parameters() if p.requires_grad]
    sampler = PromptSampler(load_manifest(cfg.data.manifest), 2, 2, cfg.trainer.seed)
    spec = setup.rollout_spec(cfg)
    init_ray(num_cpus=1, log_to_driver=False)
    try:
        engine = RayRolloutEngine(
            cfg,
            trainable_state_dict(policy.transformer),
            setup.build_policy,
            trainer_policy=policy,
            generate_timeout_s=300,
        )
        try:
            for step in (1, 2):
                groups = sampler.sample(step)
                batch = engine.generate(groups, spec)
                local = LocalRolloutEngine(policy).generate(groups, spec)
                assert torch.equal(batch.latents, local.latents) and torch.equal(batch.log_probs, local.log_probs)
            worker_moves = engine.worker_placements()[0]
            trainer_moves = engine.trainer_placements
        finally:
            engine.close()
    finally:
        ray.shutdown()

    # every module of each side moves, in each phase
    assert all(set(modules) == FROZEN_AND_DENOISER for _, _, modules in worker_moves)
    assert all(set(modules) == trainer_modules for _, _, modules in trainer_moves)
    # start (worker built while the trainer is parked), then two rollouts: park / unpark each time
    assert [place for _, place, _ in trainer_moves] == ["cpu", "device"] * 3
    assert [place for _, place, _ in worker_moves] == ["device", "cpu"] * 3
    events = [(t, "trainer", place) for t, place, _ in trainer_moves] + [
        (t, "worker", place) for t, place, _ in worker_moves
    ]
    assert both_on_device(events + [(float("-inf"), "trainer", "device")]) == []
    # the optimizer's parameters are the same objects after the round trips
    assert [p for p in policy.transformer.parameters() if p.requires_grad] == trained
