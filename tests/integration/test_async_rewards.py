"""reward.async_scoring: Ray reward workers score finished rollout chunks while the next chunk
is sampled, and the run is the same run as with in-process scoring."""

from __future__ import annotations

import csv

import pytest
import torch
from safetensors.torch import load_file

from genalign.config.loader import load_config
from genalign.training.trainer import Trainer

pytestmark = pytest.mark.ray

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


def run(model_dir, out, *extra):
    overrides = [
        f"model.path={model_dir}", "model.device=cpu", "model.dtype=float32", "model.lora.rank=4", "model.lora.alpha=8",
        "/base/distributed=local", "rollout.height=64", "rollout.width=64", "rollout.num_steps=2", "rollout.n=2",
        "rollout.rollout_batch_size=2", "rollout.sample_batch_size=2", "actor.gradient_accumulation_steps=2",
        "actor.lr=1e-2", "reward.components.ocr=0.0", "reward.components.jpeg_compressibility=1.0",
        "reward.batch_size=2", "eval.num_steps=2", "eval.max_prompts=2", "eval.every=0", "trainer.num_steps=2",
        "trainer.save_every=0", "trainer.progress_bar=false", f"trainer.output_dir={out}", *extra,
    ]
    Trainer(load_config(RECIPE, overrides)).train()
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    return rows, load_file(str(out / "checkpoint-final" / "trainable.safetensors"))


def test_async_ray_scoring_is_the_same_run_as_local_scoring(local_ray, tiny_sd3_dir, tmp_path):
    local_rows, local_weights = run(tiny_sd3_dir, tmp_path / "local")
    async_rows, async_weights = run(tiny_sd3_dir, tmp_path / "async", "reward.runtime=ray", "reward.num_workers=2",
                                    "reward.async_scoring=true")
    for a, b in zip(local_rows, async_rows):
        assert a["reward_mean"] == b["reward_mean"] and a["adv_abs_mean"] == b["adv_abs_mean"]
    assert all(torch.equal(local_weights[k], async_weights[k]) for k in local_weights)


def test_async_scoring_needs_ray_rewards(tiny_sd3_dir, tmp_path):
    from genalign.config.errors import ConfigError

    with pytest.raises(ConfigError, match="reward.async_scoring"):
        load_config(RECIPE, ["/base/distributed=local", "reward.async_scoring=true"])
