"""`placement/ray_pools.py`: every Ray actor pool counted; Ray sized for all, or the run refused."""

from __future__ import annotations

import dataclasses

import pytest

from genalign.config.errors import ConfigError
from genalign.placement.ray_pools import ray_actor_pools, ray_pool_problems, ray_start_options
from genalign.placement.resources import EnvironmentFacts, plan_resources
from genalign.preflight.load import load_config


def ray_rewards(*overrides: str):
    """The default recipe (training reward, gold judge, one quality metric) on Ray rewards."""
    return load_config(None, ["reward.runtime=ray", *overrides])


def with_reward(cfg, **changes):
    return dataclasses.replace(cfg, reward=dataclasses.replace(cfg.reward, **changes))


def test_the_training_gold_and_quality_pools_are_all_counted():
    cfg = ray_rewards("reward.num_workers=2")
    pools = ray_actor_pools(cfg)
    metrics = [f"quality metric {name!r}" for name in cfg.eval.quality_metrics]
    assert len(metrics) >= 1
    assert [pool.role for pool in pools] == ["reward 'toy_shape'", "gold reward 'toy_shape_judge'", *metrics]
    assert all(pool.actors == 2 and pool.cpus_each == 1.0 for pool in pools)
    # a 2-CPU machine: the private instance gets the logical CPUs every pool needs (it used to get
    # what the training reward needed, so the gold and metric pools never started)
    need = 2 * (2 + len(metrics))
    assert ray_start_options(cfg, None, (), cpu_count=2, environ={}) == (None, {"num_cpus": need, "num_gpus": 0.0})
    assert ray_start_options(cfg, None, (), cpu_count=2, environ={"RAY_ADDRESS": "10.0.0.1:6379"}) == (
        "10.0.0.1:6379",
        {},
    )


def test_rollout_workers_are_a_pool_too():
    cfg = load_config(
        None,
        [
            "rollout.engine=ray",
            "/base/distributed=ray_rollout",
            "rollout.num_workers=2",
            "distributed.resources.rollout.num_workers=2",
            "reward.runtime=ray",
        ],
    )
    plan, problems = plan_resources(cfg.distributed, "ray", 2, "none", EnvironmentFacts((), None))
    assert not problems
    pools = ray_actor_pools(cfg, plan)
    assert pools[-1].role == "rollout workers" and pools[-1].actors == 2
    _, options = ray_start_options(cfg, plan, (), cpu_count=2, environ={})
    assert options["num_cpus"] == 2 + len(cfg.eval.quality_metrics) + 2 * plan.rollout.num_cpus_per_worker


def test_local_rewards_start_no_pool():
    assert ray_actor_pools(load_config(None)) == []
    assert ray_pool_problems(load_config(None), None, ()) == []


def test_gpu_pools_that_could_never_start_are_refused_before_anything_starts():
    cfg = with_reward(ray_rewards(), num_gpus_per_worker=1.0)
    problems = ray_pool_problems(cfg, None, (), environ={})
    assert len(problems) == 1 and problems[0].startswith(
        "reward.num_gpus_per_worker=1 but this machine has no visible GPU"
    )
    assert "gold reward 'toy_shape_judge'" in problems[0]
    assert ray_pool_problems(cfg, None, (), environ={"RAY_ADDRESS": "10.0.0.1:6379"}) == []  # the cluster's to place
    (many,) = ray_pool_problems(cfg, None, (0, 1), environ={})
    assert (
        many.startswith(f"the Ray actor pools ask for {2 + len(cfg.eval.quality_metrics)} GPUs")
        and "2 are visible" in many
    )
    assert ray_pool_problems(with_reward(cfg, num_gpus_per_worker=0.25), None, (0, 1), environ={}) == []


def test_validation_refuses_it_as_a_config_error():
    with pytest.raises(ConfigError, match="no visible GPU and no Ray cluster"):
        load_config(None, ["reward.runtime=ray", "reward.num_gpus_per_worker=1"])
