"""rollout.overlap=one_step end to end on the toy demo with 2 Ray rollout workers: step k+1's
rollout runs on the workers while step k trains; step 1 is on-policy (parity 0, importance
weights exactly 1), later steps train on samples one update old, corrected by TIS; a resume
from a checkpoint is bitwise the run it continues (the checkpoint keeps the weights of the
rollout under way)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import TIMING_COLUMNS, read_rows

pytestmark = pytest.mark.ray

RECIPE = "experiment/toy/shapes_grpo"
COMMON = [
    "rollout.engine=ray",
    "rollout.num_workers=2",
    "distributed.resources.rollout.num_workers=2",
    "algorithm.rollout_correction.mode=truncate",
    "rollout.n=4",
    "rollout.rollout_batch_size=4",
    "rollout.sample_batch_size=8",
    "trainer.num_steps=4",
    "trainer.save_every=2",
    "trainer.progress_bar=false",
    "eval.every=0",
    "eval.at_start=false",
    "eval.max_prompts=2",
]
OVERLAP = [*COMMON, "rollout.overlap=one_step"]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from genalign.ray_session import init_ray

    init_ray(num_cpus=2, log_to_driver=False)  # the runs join it: their workers start once per run
    yield
    ray.shutdown()


def train(out: Path, overrides: list[str]) -> list[dict[str, str]]:
    from genalign.preflight.load import load_config
    from genalign.training.trainer import Trainer

    trainer = Trainer.for_config(load_config(RECIPE, [f"trainer.output_dir={out}", *overrides]))
    assert trainer is not None
    trainer.train()
    return read_rows(out / "metrics.csv")


def untimed(row: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in row.items() if k not in TIMING_COLUMNS}


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory, ray_session) -> Path:
    out = tmp_path_factory.mktemp("overlap") / "run"
    train(out, OVERLAP)
    return out


def test_later_steps_train_on_samples_one_update_old_with_their_weights(overlapped):
    rows = read_rows(overlapped / "metrics.csv")
    assert [float(r["rollout_policy_lag"]) for r in rows] == [0.0, 1.0, 1.0, 1.0]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    # step 1 samples with the weights it trains: every importance weight is exactly 1; later
    # samples come from the weights one update back, so their weights move off 1
    assert float(rows[0]["rollout_is_weight"]) == 1.0
    assert all(float(r["rollout_is_weight"]) != 1.0 for r in rows[1:])
    assert all(float(r["sync_bytes"]) > 0 for r in rows[1:])  # update k-1 pushed at step k
    assert (overlapped / "checkpoint-2" / "rollout.safetensors").is_file()


@pytest.mark.slow
def test_the_overlapped_run_samples_what_a_plain_run_samples_one_update_later(overlapped, tmp_path):
    """Step 1 is the same run with or without overlap; at step 2 the plain run samples with
    update 1's weights, the overlapped run with the first ones: different rewards."""
    plain = train(tmp_path / "plain", [*COMMON, "trainer.num_steps=2"])
    ahead = read_rows(overlapped / "metrics.csv")
    assert plain[0]["reward_mean"] == ahead[0]["reward_mean"] and plain[0]["loss"] == ahead[0]["loss"]
    assert plain[1]["reward_mean"] != ahead[1]["reward_mean"]


def test_a_resume_is_bitwise_the_run_it_continues(overlapped, tmp_path):
    resumed_dir = tmp_path / "resumed"
    resumed = train(resumed_dir, [*OVERLAP, f"trainer.resume_from={overlapped / 'checkpoint-2'}"])
    uninterrupted = read_rows(overlapped / "metrics.csv")
    assert [r["step"] for r in resumed] == ["3", "4"]
    for row, expected in zip(resumed, uninterrupted[2:]):
        assert untimed(row) == {k: v for k, v in untimed(expected).items() if k in row}
    for name in ("trainable.safetensors", "rollout.safetensors", "optimizer.safetensors"):
        a = load_file(str(overlapped / "checkpoint-final" / name))
        b = load_file(str(resumed_dir / "checkpoint-final" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
