"""The real trainer under torchrun on CPU (gloo): 2 ranks equal 1 process, and resume works.

Each rank rolls out its own prompt groups, rewards are gathered so advantages see whole
groups and the global std, gradients are averaged (DDP: composable replicate; FSDP2:
fully_shard), and rank 0 alone writes. With one optimizer step per training step the 2-rank
update equals the 1-process update over the same global batch (to fp32 reduction order).

The weights are compared after the first step: from the second step on, the rollouts are
decoded to uint8 and scored by JPEG size, so an fp32 reduction-order difference of 1e-7 in
the weights can flip a pixel, change a JPEG by a byte and move an advantage — a real
difference in the data, not in the distributed update.
"""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered

pytestmark = pytest.mark.distributed

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def overrides(model_dir: Path, out: Path, strategy: str, *extra: str) -> list[str]:
    return [
        f"model.path={model_dir}", "model.device=cpu", "model.dtype=float32", "model.lora.rank=4", "model.lora.alpha=8",
        "/base/distributed=local", f"distributed.training.strategy={strategy}", "distributed.training.backend=gloo",
        "rollout.height=64", "rollout.width=64", "rollout.num_steps=3", "rollout.n=2", "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2", "actor.gradient_accumulation_steps=2", "actor.lr=1e-2", "actor.ema.update_every=1",
        "reward.components.ocr=0.0", "reward.components.jpeg_compressibility=1.0",
        "eval.num_steps=2", "eval.max_prompts=2", "eval.batch_size=2", "eval.every=0",
        "trainer.num_steps=2", "trainer.save_every=1", "trainer.progress_bar=false", f"trainer.output_dir={out}",
        *extra,
    ]


def launch(nproc: int, args: list[str], recipe: str = RECIPE) -> None:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "MASTER_ADDR": "127.0.0.1"}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--master_port={free_port()}", "--master_addr=127.0.0.1", "-m", "genalign.train", "--config", recipe,
               *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


def weights(run: Path, name: str = "checkpoint-final") -> dict[str, torch.Tensor]:
    return load_file(str(run / name / "trainable.safetensors"))


@pytest.fixture(scope="module")
def single_process(tiny_sd3_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    launch(1, overrides(tiny_sd3_dir, out, "ddp"))
    return out


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_reach_the_one_process_weights(single_process, tiny_sd3_dir, tmp_path, strategy):
    out = tmp_path / strategy
    launch(2, overrides(tiny_sd3_dir, out, strategy))
    one, two = weights(single_process, "checkpoint-1"), weights(out, "checkpoint-1")
    assert sorted(one) == sorted(two) and all("lora" in k for k in one)
    # lora_B starts at zero: the first step must have moved it
    assert any(v.abs().max() > 0 for k, v in one.items() if "lora_B" in k), "the first step did not move the adapter"
    for name in one:
        # 2 ranks only regroup the gradient sums (all-reduce of two halves): rounding through forward,
        # backward and the optimizer step, relative to the weights' magnitude
        assert_close_reordered(two[name], one[name], length=TINY_REDUCTION, depth=2 * TINY_DEPTH)
    # rank 0 alone wrote the run directory, with the same rows as the 1-process run
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"]
    reference = list(csv.DictReader(open(single_process / "metrics.csv")))
    for key in ("reward_mean", "reward_std", "adv_abs_mean", "zero_std_ratio"):  # whole-step statistics
        assert rows[0][key] == reference[0][key], key
    assert (out / "checkpoint-final" / "lora" / "pytorch_lora_weights.safetensors").exists()


def test_two_rank_resume_continues_the_run(tiny_sd3_dir, tmp_path):
    first = tmp_path / "first"
    launch(2, overrides(tiny_sd3_dir, first, "ddp", "trainer.loggers=[csv,tensorboard]"))
    # rank 0 alone writes the trackers and train.log
    assert len(list((first / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert (first / "train.log").read_text().count("run plan:") == 1
    resumed = tmp_path / "resumed"
    launch(2, overrides(tiny_sd3_dir, resumed, "ddp", f"trainer.resume_from={first / 'checkpoint-1'}"))
    a, b = weights(first), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


JANUS_RECIPE = "experiment/autoregressive/janus_pro/online_grpo_ocr"


def janus_overrides(model_dir: Path, out: Path, strategy: str) -> list[str]:
    """A full fine-tune of the tiny Janus language model: its input embeddings are looked up
    outside the module's forward (Janus mixes text and image-token embeddings), so this checks
    that DDP still averages every trained parameter's gradient, the embedding table included."""
    return [
        f"model.path={model_dir}", "model.device=cpu", "model.dtype=float32", "model.train_mode=full",
        "/base/distributed=local", f"distributed.training.strategy={strategy}", "distributed.training.backend=gloo",
        "rollout.height=32", "rollout.width=32", "rollout.n=2", "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2", "actor.gradient_accumulation_steps=2", "actor.lr=1e-3",
        "reward.components.ocr=0.0", "reward.components.jpeg_compressibility=1.0", "eval.every=0",
        "trainer.num_steps=1", "trainer.save_every=1", "trainer.progress_bar=false", f"trainer.output_dir={out}",
    ]


def test_janus_full_finetune_two_ranks_reach_the_one_process_weights(tiny_janus_dir, tmp_path):
    launch(1, janus_overrides(tiny_janus_dir, tmp_path / "one", "ddp"), JANUS_RECIPE)
    launch(2, janus_overrides(tiny_janus_dir, tmp_path / "two", "ddp"), JANUS_RECIPE)
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert sorted(one) == sorted(two)
    [embedding] = [k for k in one if k.endswith("embed_tokens.weight")]  # trained in a full fine-tune
    base = load_file(str(tiny_janus_dir / "model.safetensors"))
    [initial] = [v for k, v in base.items() if k.endswith("language_model.embed_tokens.weight")]
    assert not torch.equal(one[embedding], initial), "the step did not move the embedding table"
    for name in one:
        # 2 ranks only regroup the gradient sums (all-reduce of two halves): rounding through forward,
        # backward and the optimizer step, relative to the weights' magnitude
        assert_close_reordered(two[name], one[name], length=TINY_REDUCTION, depth=2 * TINY_DEPTH)
