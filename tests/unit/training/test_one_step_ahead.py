"""rollout.overlap=one_step (`training/sources.py:OneStepAhead`): the order in which rollouts
begin and weights reach the rollout, checked on the toy model with an engine that records
what it is asked and samples in-process; the config checks that refuse what cannot overlap."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from genalign.algorithms.registry import algorithm_class
from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.preflight.memory_plan import estimate_memory
from genalign.preflight.step_sizes import StepSizes
from genalign.rewards.composite import build_reward_runtime
from genalign.rollout.engine import LocalRolloutEngine
from genalign.runs.checkpoint import CheckpointState
from genalign.training import setup
from genalign.training.distributed import RankInfo
from genalign.training.sources import OneStepAhead, OnlineRollout

OVERLAP = [
    "rollout.engine=ray",
    "rollout.overlap=one_step",
    "algorithm.rollout_correction.mode=truncate",
    "rollout.n=2",
    "rollout.rollout_batch_size=2",
    "rollout.sample_batch_size=4",
    "rollout.num_steps=4",
    "trainer.num_steps=3",
    "algorithm.kl_beta=0",
]


class RecordingEngine:
    """Samples in-process, and records every rollout begun (with the weights' version it holds
    then) and every sync, in order."""

    needs_sync = True

    def __init__(self, policy):
        self.local = LocalRolloutEngine(policy)
        self.version: int | None = 0  # the engine's first sync, as the Ray engine's constructor does
        self.state: dict[str, torch.Tensor] = {"w": torch.zeros(1)}
        self.events: list[tuple[str, int | None]] = []

    def start(self, groups, spec, positions=None):
        self.events.append(("start", self.version))
        return self.local.start(groups, spec, positions)

    def generate(self, groups, spec, positions=None):
        raise AssertionError("a one-step-ahead source only begins rollouts")

    def sync(self, state, version):
        self.events.append(("sync", version))
        self.state, self.version = state, version
        return {"sync_s": 0.0}

    def rollout_state(self):
        return self.state, self.version


def source_for(overrides: list[str], engine_holder: list) -> OneStepAhead:
    cfg = load_config("experiment/toy/shapes_grpo", overrides)
    policy = setup.build_policy(cfg)
    engine = RecordingEngine(policy)
    engine_holder.append(engine)
    algorithm = algorithm_class(cfg)(cfg.algorithm, None, parameters={})
    rewards = build_reward_runtime(cfg.reward, policy.device)

    def sync(version: int) -> dict[str, float]:  # the trainer's: its weights after update `version`
        return engine.sync({"w": torch.full((1,), float(version))}, version)

    source = setup.build_batch_source(
        cfg, StepSizes.from_config(cfg), policy, engine, rewards, algorithm, setup.rollout_spec(cfg), RankInfo(), sync
    )
    assert isinstance(source, OneStepAhead)
    return source


def test_each_rollout_begins_a_step_ahead_with_the_weights_of_the_update_before():
    engines: list[RecordingEngine] = []
    source = source_for(OVERLAP, engines)
    lags = []
    for step in (1, 2, 3):
        data = source.collect(step)
        lags.append(data.row["rollout_policy_lag"])
        assert source.after_update(step) == {}  # the weights go out before the next rollout instead
    # step 1 begins its own rollout and step 2's (both with the first weights); step k then
    # pushes update k-1 and begins step k+1's with it; the last step begins nothing
    assert engines[0].events == [("start", 0), ("start", 0), ("sync", 1), ("start", 1), ("sync", 2)]
    assert lags == [0.0, 1.0, 1.0]
    assert len(data.trajectories) == 4 and data.row["sync_s"] == 0.0


def test_a_resume_puts_back_the_weights_of_the_rollout_under_way():
    """The checkpoint of step 2 keeps the weights step 3's rollout began with (update 1's); the
    resumed run pushes them, begins step 3 with them, then pushes update 2: as uninterrupted."""
    engines: list[RecordingEngine] = []
    source = source_for(OVERLAP, engines)
    rollout = {"w": torch.full((1,), 1.0)}
    checkpoint = CheckpointState(Path("checkpoint-2"), 2, {}, {}, None, {}, {}, rollout=rollout)
    source.restore(checkpoint)
    data = source.collect(3)
    assert engines[0].events == [("sync", 1), ("start", 1), ("sync", 2)]
    assert data.row["rollout_policy_lag"] == 1.0
    assert source.state_dict()["w"].item() == 2.0  # what a checkpoint now would keep


def test_a_checkpoint_without_rollout_weights_resumes_from_its_own():
    engines: list[RecordingEngine] = []
    source = source_for(OVERLAP, engines)
    source.restore(CheckpointState(Path("checkpoint-2"), 2, {}, {}, None, {}, {}))
    source.collect(3)
    assert engines[0].events == [("sync", 2), ("start", 2)]


def test_without_overlap_the_weights_go_out_after_each_update():
    cfg = load_config("experiment/toy/shapes_grpo", [])
    calls = []
    source = OnlineRollout.__new__(OnlineRollout)  # only the weights' schedule is exercised
    source.sync = lambda version: calls.append(version) or {}
    source.after_update(4)
    source.restore(CheckpointState(Path("c"), 7, {}, {}, None, {}, {}, rollout={"w": torch.zeros(1)}))
    assert calls == [4, 7] and source.state_dict() == {} and cfg.rollout.overlap == "off"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rollout.engine=local"], "rollout.engine=local samples in the trainer's process"),
        (["distributed.colocated=true"], "distributed.colocated=true shares the trainer's"),
        (["algorithm.rollout_correction.mode=off"], "set algorithm.rollout_correction.mode=truncate"),
    ],
)
def test_what_cannot_overlap_is_refused_naming_the_keys(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("experiment/toy/shapes_grpo", [*OVERLAP, *overrides])


def test_diffusion_nft_overlaps_without_a_correction():
    """NFT trains on no rollout log-prob (its samples come from its own old policy anyway)."""
    cfg = load_config("experiment/toy/shapes_nft", [o for o in OVERLAP if "rollout_correction" not in o])
    assert cfg.rollout.overlap == "one_step"


def test_offline_dpo_cannot_overlap():
    with pytest.raises(ConfigError, match="trains on no rollout"):
        load_config("experiment/toy/offline_dpo", [o for o in OVERLAP if "rollout_correction" not in o])


def test_the_memory_plan_holds_the_next_steps_trajectories_in_host_memory():
    plain = dict(estimate_memory(load_config("experiment/toy/shapes_grpo", OVERLAP[:1] + OVERLAP[2:])).host)
    ahead = dict(estimate_memory(load_config("experiment/toy/shapes_grpo", OVERLAP)).host)
    assert ahead["trajectories of the next step (rollout.overlap)"] == plain["trajectories"] > 0
    assert ahead["prompt embeddings of the next step (rollout.overlap)"] == plain["prompt embeddings"]
