"""reward.async_scoring: finished rollout chunks are scored while the next chunk is sampled, on
Ray reward workers or on a worker thread of this process, and the run is the same run as with
serial in-process scoring."""

from __future__ import annotations

import csv

import pytest
import torch
from safetensors.torch import load_file

from genalign.preflight.load import load_config
from genalign.rewards.composite import LocalRewardRuntime
from genalign.training.trainer import Trainer

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"


TOY_RECIPE = "experiment/toy/shapes_grpo"


@pytest.fixture(scope="module")
def local_ray():
    import ray

    from genalign.ray_session import init_ray

    init_ray(num_cpus=2, log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


def run(model_dir, out, *extra):
    overrides = [
        f"model.path={model_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "/base/distributed=local",
        "rollout.height=64",
        "rollout.width=64",
        "rollout.num_steps=2",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=2",
        "actor.lr=1e-2",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        "reward.batch_size=2",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.every=0",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *extra,
    ]
    Trainer(load_config(RECIPE, overrides)).train()
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    return rows, load_file(str(out / "checkpoint-final" / "trainable.safetensors"))


@pytest.mark.ray
def test_async_ray_scoring_is_the_same_run_as_local_scoring(local_ray, tiny_sd3_dir, tmp_path):
    local_rows, local_weights = run(tiny_sd3_dir, tmp_path / "local")
    async_rows, async_weights = run(
        tiny_sd3_dir, tmp_path / "async", "reward.runtime=ray", "reward.num_workers=2", "reward.async_scoring=true"
    )
    for a, b in zip(local_rows, async_rows):
        assert a["reward_mean"] == b["reward_mean"] and a["adv_abs_mean"] == b["adv_abs_mean"]
    assert all(torch.equal(local_weights[k], async_weights[k]) for k in local_weights)


def run_toy(out, *extra):
    """3 steps of the default toy recipe, shrunk: 8 samples a step in 2 rollout chunks of 4.

    reward.batch_size equals the chunk size, so serial scoring of the whole step and async
    scoring chunk by chunk make the same scorer calls on the same images."""
    overrides = [
        "rollout.num_steps=4",
        "rollout.n=2",
        "rollout.rollout_batch_size=4",
        "rollout.sample_batch_size=4",
        "reward.batch_size=4",
        "eval.every=0",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "trainer.num_steps=3",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *extra,
    ]
    trainer = Trainer(load_config(TOY_RECIPE, overrides))
    trainer.train()
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    return rows, load_file(str(out / "checkpoint-final" / "trainable.safetensors")), trainer.rewards


def test_async_local_scoring_is_the_same_run_as_serial_scoring(tmp_path, monkeypatch):
    pools_at_close = {}  # runtime -> its worker pool when the trainer closed it (the gold runtime is closed too)
    close = LocalRewardRuntime.close

    def recording_close(self):
        pools_at_close.setdefault(id(self), self._pool)
        close(self)

    monkeypatch.setattr(LocalRewardRuntime, "close", recording_close)
    serial_rows, serial_weights, serial_rewards = run_toy(tmp_path / "serial")
    async_rows, async_weights, async_rewards = run_toy(tmp_path / "async", "reward.async_scoring=true")
    assert pools_at_close[id(serial_rewards)] is None  # serial: no worker thread
    assert pools_at_close[id(async_rewards)] is not None  # async: scored on the worker thread
    assert async_rewards._pool is None  # and the trainer shut that thread down
    assert len(serial_rows) == len(async_rows) == 3

    def untimed(row):
        return {k: v for k, v in row.items() if not k.startswith("time_") and not k.endswith("images_per_s")}

    for a, b in zip(serial_rows, async_rows):
        assert untimed(a) == untimed(b)  # rewards, advantages, loss, kl, clip: every logged digit
    assert serial_weights.keys() == async_weights.keys()
    assert all(torch.equal(serial_weights[k], async_weights[k]) for k in serial_weights)


def test_async_scoring_needs_the_in_process_rollout_engine():
    from genalign.config.errors import ConfigError

    load_config(RECIPE, ["/base/distributed=local", "reward.async_scoring=true"])  # local rewards: fine
    with pytest.raises(ConfigError, match="rollout.engine=ray use reward.async_scoring=false"):
        load_config(RECIPE, ["reward.async_scoring=true"])  # the recipe's Ray rollout engine
