"""Resource planning for the distributed presets, on made-up machines (no GPU needed)."""

from __future__ import annotations

import pytest

from genalign.config.errors import ConfigError
from genalign.placement.config import DistributedConfig, ResourcesConfig, RolloutResources, TrainerResources
from genalign.placement.resources import EnvironmentFacts, parse_visible_devices, plan_resources
from genalign.preflight.load import load_config

CPU = EnvironmentFacts(visible_gpus=(), ray_address=None)
FOUR_GPUS = EnvironmentFacts(visible_gpus=(0, 1, 2, 3), ray_address=None)


def preset(name: str, trainer_gpus=1, rollout_gpus: float | str = "auto", workers: int = 1, **resources):
    colocated = name == "ray_rollout_colocated_single_gpu"
    return DistributedConfig(
        preset=name,
        colocated=colocated,
        cross_node=name == "ray_rollout_cross_node",
        resources=ResourcesConfig(
            trainer=TrainerResources(num_gpus=trainer_gpus, devices=resources.get("trainer")),
            rollout=RolloutResources(num_gpus=rollout_gpus, num_workers=workers, devices=resources.get("rollout")),
            visible_devices=resources.get("visible"),
        ),
    )


def plan(dist, facts, workers=None, engine="ray", strategy="none"):
    workers = dist.resources.rollout.num_workers if workers is None else workers
    return plan_resources(dist, engine, workers, strategy, facts)


def test_every_preset_runs_on_a_cpu_machine():
    for name in ["ray_rollout", "ray_rollout_colocated_single_gpu"]:
        result, problems = plan(preset(name, workers=2), CPU)
        assert problems == []
        assert not result.uses_gpu and result.rollout.num_gpus_per_worker == 0 and result.ray_num_cpus == 2
    result, problems = plan(preset("ray_rollout_cross_node", rollout_gpus=1), EnvironmentFacts((), "127.0.0.1:6379"))
    assert problems == [] and result.ray_address == "127.0.0.1:6379"


def test_split_gives_the_rest_to_rollout_one_worker_per_gpu():
    result, problems = plan(preset("ray_rollout", workers=3), FOUR_GPUS)
    assert problems == [] and result.trainer_devices == (0,) and result.trainer_cuda_indices == (0,)
    assert result.rollout.worker_devices == ((1,), (2,), (3,)) and result.rollout.num_gpus_per_worker == 1
    assert result.ray_num_gpus == 3


def test_a_worker_given_several_gpus_is_refused_with_what_to_set():
    # the seed's split command: one default worker would get GPUs 1-3 and sample on one of them
    for workers in (1, 2):
        _, problems = plan(preset("ray_rollout", workers=workers), FOUR_GPUS)
        assert problems == [
            f"3 rollout GPU(s) [1, 2, 3] for rollout.num_workers={workers} would give each worker "
            f"{3 // workers} GPUs, but a rollout worker samples on one GPU and would leave the rest "
            "idle; set rollout.num_workers=3 and distributed.resources.rollout.num_workers=3 (one "
            f"worker per GPU), or distributed.resources.rollout.num_gpus={workers}"
        ]
    result, problems = plan(preset("ray_rollout", rollout_gpus=1), FOUR_GPUS)  # the other fix: ask for fewer
    assert problems == [] and result.rollout.worker_devices == ((1,),)
    _, problems = plan(
        preset("ray_rollout_cross_node", rollout_gpus=4, workers=2), EnvironmentFacts((0,), "10.0.0.1:6379")
    )
    assert "set rollout.num_workers=4" in problems[0]


def test_a_one_process_trainer_gets_one_gpu_and_it_is_its_device():
    _, problems = plan(preset("ray_rollout", trainer_gpus=2, rollout_gpus=1), FOUR_GPUS)
    assert problems == [
        "distributed.resources.trainer.num_gpus gives the trainer GPUs [0, 1], but "
        "distributed.training.strategy=none trains in one process on one GPU; give the trainer one "
        "GPU, or launch torchrun --nproc_per_node=2 with distributed.training.strategy=ddp or fsdp2"
    ]
    result, problems = plan(preset("local", trainer_gpus=2), FOUR_GPUS, engine="local", strategy="ddp")
    assert problems == [] and result.trainer_cuda_indices == (0, 1)  # rank k takes cuda:k
    # a pin is applied as the trainer's cuda index within the visible list
    result, problems = plan(preset("ray_rollout", trainer=[2], rollout=[3]), EnvironmentFacts((1, 2, 3), None))
    assert problems == [] and result.trainer_cuda_indices == (1,)


def test_colocated_workers_share_the_trainer_device():
    result, problems = plan(
        preset("ray_rollout_colocated_single_gpu", rollout_gpus=1, workers=2), EnvironmentFacts((0,), None)
    )
    assert problems == [] and result.colocated
    assert result.trainer_devices == (0,) and result.rollout.worker_devices == ((0,), (0,))
    assert result.rollout.num_gpus_per_worker == 0.5


def test_more_gpus_than_visible_is_a_config_error():
    _, problems = plan(preset("ray_rollout", trainer_gpus=1, rollout_gpus=4), FOUR_GPUS)
    assert "needs 5 GPUs but only 4 are visible" in problems[0]
    _, problems = plan(preset("ray_rollout", trainer_gpus=6), FOUR_GPUS)
    assert "trainer.num_gpus=6 but only 4 GPU(s)" in problems[0]
    _, problems = plan(preset("ray_rollout", trainer_gpus=1), EnvironmentFacts((0,), None))
    assert "no GPU is left for rollout" in problems[0]


def test_seed_pinning_example_and_pin_errors():
    result, problems = plan(
        preset(
            "ray_rollout_colocated_single_gpu",
            rollout_gpus=1,
            visible=[0, 1, 2, 3],
            trainer=[0],
            rollout=[1, 2, 3],
            workers=3,
        ),
        FOUR_GPUS,
    )
    assert problems == [] and not result.colocated  # the pins win over the colocated preset
    assert result.trainer_devices == (0,) and result.rollout.worker_devices == ((1,), (2,), (3,))
    _, problems = plan(preset("ray_rollout", trainer=[0, 1], rollout=[1, 2]), FOUR_GPUS)
    assert any("overlap on [1]" in p for p in problems)
    _, problems = plan(preset("ray_rollout", trainer=[0], rollout=[5]), FOUR_GPUS)
    assert "pins device(s) [5] but only [0, 1, 2, 3] are visible" in problems[0]
    _, problems = plan(preset("ray_rollout", visible=[0, 1], trainer=[0], rollout=[3]), FOUR_GPUS)
    assert "not within distributed.resources.visible_devices" in problems[0]
    result, problems = plan(preset("ray_rollout", visible=[2, 3], trainer=[3], rollout=[2]), FOUR_GPUS)
    assert problems == [] and result.trainer_local_index == 3


def test_cross_node_needs_ray_address_and_forbids_pins():
    _, problems = plan(preset("ray_rollout_cross_node", rollout_gpus=1), CPU)
    assert any("set RAY_ADDRESS" in p for p in problems)
    _, problems = plan(
        preset("ray_rollout_cross_node", rollout_gpus=1, rollout=[1]), EnvironmentFacts((0, 1), "10.0.0.1:6379")
    )
    assert any("cannot pin devices on other nodes" in p for p in problems)
    _, problems = plan(preset("ray_rollout_cross_node"), EnvironmentFacts((), "10.0.0.1:6379"))
    assert any("num_gpus=auto cannot be resolved across nodes" in p for p in problems)


def test_worker_counts_must_agree_and_ray_excludes_torchrun():
    _, problems = plan(preset("ray_rollout", workers=2), CPU, workers=1)
    assert "rollout.num_workers=1 and distributed.resources.rollout.num_workers=2 disagree" in problems[0]
    _, problems = plan(preset("ray_rollout"), CPU, strategy="ddp")
    assert "not supported" in problems[0]
    _, problems = plan(preset("ray_rollout"), CPU, engine="local")
    assert "need rollout.engine=ray" in problems[0]


def test_visible_devices_come_from_cuda_visible_devices():
    assert parse_visible_devices(None, 2) == (0, 1)
    assert parse_visible_devices("3,1", 2) == (3, 1)
    assert parse_visible_devices("0,1", 0) == ()
    with pytest.raises(ValueError, match="integer device index"):
        parse_visible_devices("GPU-abc", 1)


def test_config_loading_reports_resource_problems(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match="set RAY_ADDRESS"):
        load_config("experiment/diffusion/sd3_5/online_grpo_ocr", ["/base/distributed=ray_rollout_cross_node"])
    with pytest.raises(ConfigError, match="one size"):
        load_config("experiment/diffusion/sd3_5/online_grpo_ocr", ["distributed.resources.rollout.num_workers=2"])


@pytest.mark.parametrize(
    "key, why",
    [("num_cpus", "Ray reserves no CPUs for it"), ("num_workers", "the trainer's processes are torchrun's ranks")],
)
def test_the_trainer_role_has_no_cpu_or_worker_count_and_setting_one_says_why(key, why):
    """The trainer is the launching process (or each torchrun rank), so a Ray CPU count or a
    worker count for it would be a key that nothing reads: the error names the key and what
    to set instead, and a checkpoint whose stored config still lists it loads."""
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"distributed.resources.trainer.{key}=2"], check_files=False)
    (problem,) = info.value.problems
    assert problem.startswith(f"distributed.resources.trainer.{key}: not a config key (set in command line")
    assert why in problem and f"distributed.resources.rollout.{key}" in problem

    from genalign.config.loader import config_to_dict
    from genalign.preflight.stored_config import config_from_checkpoint

    stored = config_to_dict(load_config(None, [], check_files=False))
    stored["distributed"]["resources"]["trainer"].update(num_cpus=1, num_workers=1)  # as written before
    cfg = config_from_checkpoint(stored, "checkpoint-3/config.yaml", {}, check_machine=False)
    assert cfg.distributed.resources.trainer == TrainerResources()
