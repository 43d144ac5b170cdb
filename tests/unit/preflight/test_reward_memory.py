"""Reward models in the memory plan: on the trainer's GPU when and only when their runtime puts them there."""

import pytest

from genalign.preflight import memory_plan as mp
from genalign.preflight.load import load_config
from genalign.rewards.model_sizes import DeviceModel, model_sizes

COSMOS = "experiment/diffusion/cosmos/online_grpo_pickscore"  # in-process rollout, PickScore on the trainer's GPU
PICKSCORE = "training reward pickscore (yuvalkirstain/PickScore_v1, float32)"


def _plan(recipe: str, *overrides: str):
    return mp.estimate_memory(load_config(recipe, list(overrides), check_files=False))


def _phases(role) -> dict[str, dict[str, float]]:
    return {phase.name: dict(phase.lines) for phase in role.phases}


def test_local_training_reward_is_on_the_gpu_through_replay_but_offloaded_while_sampling():
    """training/sources.py offloads the reward runtime around `generate` and onloads it to
    score: the scorer is on the trainer's GPU in replay, the optimizer step and evaluation,
    not while the policy samples."""
    [trainer] = _plan(COSMOS).roles
    [pickscore] = model_sizes("pickscore", DeviceModel("model_name", "yuvalkirstain/PickScore_v1", "float32"))
    phases = _phases(trainer)
    assert PICKSCORE not in phases["rollout"] and PICKSCORE not in dict(trainer.resident)
    for phase in ("replay", "optimizer step", "evaluation"):
        assert phases[phase][PICKSCORE] == pickscore.bytes
    bf16 = _phases(_plan(COSMOS, "reward.kwargs.pickscore.dtype=bfloat16").roles[0])
    assert bf16["replay"]["training reward pickscore (yuvalkirstain/PickScore_v1, bfloat16)"] == pickscore.bytes / 2


def test_async_scoring_keeps_the_reward_resident():
    """reward.async_scoring scores chunks while the policy samples: never offloaded."""
    [trainer] = _plan(COSMOS, "reward.async_scoring=true").roles
    assert PICKSCORE in dict(trainer.resident)
    assert all(PICKSCORE not in dict(phase.lines) for phase in trainer.phases)  # counted once


def test_gold_rewards_stay_on_the_gpu_even_while_the_colocated_worker_samples():
    """The evaluator's gold rewards are built once and never offloaded: on the shared GPU in
    both phases of the colocated preset, beside the training reward (only in the train phase)."""
    rollout, train = _plan("experiment/diffusion/sd3_5/online_grpo_geneval").roles
    gold = [what for what in dict(train.resident) if what.startswith("gold rewards geneval_accuracy")]
    assert sorted(gold) == [
        "gold rewards geneval_accuracy (facebook/mask2former-swin-small-coco-instance, float32)",
        "gold rewards geneval_accuracy (openai/clip-vit-large-patch14, float32)",
    ]
    assert set(gold) <= set(dict(rollout.resident))
    assert any(what.startswith("training reward geneval") for what in _phases(train)["replay"])
    assert not any(what.startswith("training reward") for what, _ in rollout.lines)


def test_ray_and_http_runtimes_place_reward_models_off_the_trainers_gpu(monkeypatch):
    local = _plan(COSMOS).roles[0]
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")  # a cluster whose GPUs Ray assigns (nothing connects here)
    trainer, actor = _plan(COSMOS, "reward.runtime=ray", "reward.num_gpus_per_worker=1").roles
    monkeypatch.delenv("RAY_ADDRESS")
    assert not any("reward" in what for what, _ in trainer.lines)
    assert actor.name.startswith("Ray reward actor of training reward pickscore")
    assert dict(actor.resident)["training reward pickscore (yuvalkirstain/PickScore_v1, float32)"] > 3.6 * 2**30
    assert trainer.allocated_bytes < local.allocated_bytes
    cpu = _plan(COSMOS, "reward.runtime=ray")
    assert len(cpu.roles) == 1 and any("Ray actors on the CPU" in note for note in cpu.notes)
    http = _plan(COSMOS, "reward.runtime=http", "reward.url=http://127.0.0.1:8700")
    assert len(http.roles) == 1 and any("reward server" in note for note in http.notes)
    assert http.roles[0].allocated_bytes == cpu.roles[0].allocated_bytes == trainer.allocated_bytes


def test_a_reward_model_no_config_describes_refuses_the_plan_naming_the_option():
    with pytest.raises(
        mp.NoMemoryEstimate,
        match=r"reward.kwargs.pickscore.model_name='someone/clip': no config "
        r"describes this model.*gpu_memory_fraction=null",
    ):
        _plan(COSMOS, "reward.kwargs.pickscore.model_name=someone/clip")


def test_your_own_scorer_is_noted_as_not_counted():
    plan = _plan(
        COSMOS,
        "reward.components.pickscore=0.0",
        "reward.components={support:RankOneConstantReward: 1.0}",
        "reward.allow_import=[support:RankOneConstantReward]",
    )
    assert not any("reward" in what for what, _ in plan.roles[0].lines)
    assert any(note.startswith("reward support:RankOneConstantReward (your own scorer)") for note in plan.notes)
