"""What a 2-rank run logs is the job's, and ranks agree on positions per unit (gloo, CPU).

The update loop under torchrun with a rank that trains nothing and with ranks that train
unequal numbers of units: every rank derives the same columns, and they equal the values
computed from the union of both ranks' recorded losses and statistics (not rank 0's). The real
trainer with rank 0's groups scoring alike: `metrics.csv` says what rank 1 trained, and the
console has one step line per step and one evaluation line. A user algorithm that trains one
position fewer on rank 1 stops at once with a one-line error naming it, with the parity
preflight on and off, instead of hanging in a collective until `distributed.training.timeout_s`.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

TESTS = Path(__file__).resolve().parents[1]  # `support` and `user_algorithms` are importable by the ranks
HANG_BOUND_S = 420
"""A run that hung in a collective would wait `distributed.training.timeout_s` (set far above
this): the subprocess timeout turns a hang into a failure, with room for a loaded machine."""


def torchrun(*args: str) -> subprocess.CompletedProcess:
    """2 ranks on loopback. `--standalone`: the agent binds a free port itself, so a port picked
    here cannot be taken by another job on a shared machine before torchrun binds it."""
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=HANG_BOUND_S)


# ---------------------------------------------------------------- the update loop's columns
UPDATE_SCRIPT = r"""
import dataclasses, json, sys, torch
from types import SimpleNamespace
from genalign.algorithms.base import AlgorithmBase
from genalign.training import distributed as dist
from genalign.training.config import ActorConfig
from genalign.training.job_metrics import step_columns
from genalign.training.parity import replay_parity
from genalign.training.update import PositionMismatch, UpdateContext, run_update
from support import make_batch

case, out = sys.argv[1], sys.argv[2]
info = dist.init_distributed("ddp", backend="gloo", timeout_s=3600)  # a hang fails at the test's bound

class Regression(AlgorithmBase):  # per-unit statistics that differ between units, positions and ranks
    stat_extremes = {"ratio": ("min", "max"), "drift": ("max",)}
    def __init__(self, module, positions):
        self.module, self.positions, self.calls = module, positions, []
        self.cfg = SimpleNamespace(drop_zero_advantage=True)
    def train_step_indices(self, batch):
        return self.positions
    def compute_loss(self, policy, batch, advantages, j):
        out = self.module(batch.latents[:, j].flatten(1)).sum(1)  # [b]
        loss = ((out - advantages) ** 2).mean()
        stats = {"ratio": out.detach().exp(), "drift": (out.detach() - advantages).abs(), "kl": out.detach() ** 2}
        if bool((advantages != 0).all()):  # a trained micro-batch, not a filler: the union's columns come from these
            self.calls.append({"loss": loss.item(), "units": len(batch), **{k: v.tolist() for k, v in stats.items()}})
        return loss, stats

# every trained unit has a non-zero advantage (no filter top-up: whole micro-batches of them), every filler 0
torch.manual_seed(0)
whole = make_batch(size=8, steps=3)  # latents [8, 4, 2, 2]: 4 inputs per position
adv = torch.randn(8, generator=torch.Generator().manual_seed(0))
if case == "idle":  # rank 0's groups scored alike: advantage 0, nothing to train; rank 1 trains all 4
    adv[:4] = 0
else:  # unequal ("short": the same, with one position fewer on rank 1): rank 0 trains 4, rank 1 2 of its 4
    adv[6:] = 0
mine = slice(4 * info.rank, 4 * info.rank + 4)
units = whole.index(torch.arange(8)[mine])

torch.manual_seed(0)
module = dist.wrap_for_training(torch.nn.Linear(4, 4, bias=False), "ddp")
params = list(module.parameters())
positions = [0, 1, 2][:2 if case == "short" and info.rank == 1 else 3]
algorithm = Regression(module, positions)
actor = ActorConfig(gradient_accumulation_steps=1, max_grad_norm=1e9, num_inner_epochs=1, shuffle_samples=False)
policy = SimpleNamespace(device=torch.device("cpu"))
context = UpdateContext(policy, algorithm, torch.optim.SGD(params, lr=0.05), params, actor, None, info, module)
record = {"rank": info.rank}
try:
    result = run_update(context, units, adv[mine], 2, torch.Generator().manual_seed(0))
except PositionMismatch as error:
    record["error"] = str(error)
else:
    phases = {"time_train_s": float(info.rank + 1), "time_cpu_s": float(info.rank + 1)}
    record.update(columns=step_columns(result, phases, info), calls=algorithm.calls,
                  trained=result.trained_samples, total=result.total_samples, own=result.metrics())
    # the parity preflight's gaps: each rank replays its own trajectories; the largest gap is the job's
    stored = dataclasses.replace(units, log_probs=torch.zeros(4, 3))  # exact gaps: the offsets themselves
    replay = lambda policy, batch, steps, chunk: batch.log_probs + torch.tensor([0.0, 0.5 * info.rank, 0.25])
    record["parity"] = replay_parity(policy, stored, [0, 1, 2], 2, replay=replay, ranks=info)
with open(f"{out}.{info.rank}.json", "w") as f:
    json.dump(record, f)
dist.barrier(info)
dist.shutdown()
"""


def run_update_ranks(tmp_path: Path, case: str) -> list[dict]:
    script = tmp_path / "update_ranks.py"
    script.write_text(UPDATE_SCRIPT)
    out = tmp_path / case
    finished = torchrun(str(script), case, str(out))
    assert finished.returncode == 0, finished.stderr[-4000:]
    return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(2)]


def union_columns(ranks: list[dict]) -> dict[str, float]:
    """The columns one process would log had it recorded both ranks' calls."""
    calls = [call for rank in ranks for call in rank["calls"]]
    values = {name: [v for call in calls for v in call[name]] for name in ("ratio", "drift", "kl")}
    return {
        "trained_fraction": sum(r["trained"] for r in ranks) / sum(r["total"] for r in ranks),
        "loss": sum(c["loss"] * c["units"] for c in calls) / sum(c["units"] for c in calls),
        **{name: sum(v) / len(v) for name, v in values.items()},
        "ratio_min": min(values["ratio"]),
        "ratio_max": max(values["ratio"]),
        "drift_max": max(values["drift"]),
    }


@pytest.mark.parametrize("case", ["idle", "unequal"])
def test_every_rank_logs_the_columns_of_the_union_of_both_ranks_units(tmp_path, case):
    """idle: rank 0 (which writes the metrics) trains nothing, rank 1 four units; unequal: rank
    0 trains 4 units, rank 1 2. Both ranks hold the same columns, equal to the union's (sums of
    float32 values in float64: only the order of two partial sums differs), with the slowest
    rank's wall seconds and the CPU seconds of both."""
    ranks = run_update_ranks(tmp_path, case)
    columns = ranks[0]["columns"]
    assert ranks[1]["columns"] == columns
    expected = union_columns(ranks)
    assert columns["trained_fraction"] == expected["trained_fraction"] == (0.5 if case == "idle" else 0.75)
    for name in ("loss", "ratio", "drift", "kl"):
        assert math.isclose(columns[name], expected[name], rel_tol=1e-12), name
    for name in ("ratio_min", "ratio_max", "drift_max"):
        assert columns[name] == expected[name], name
    assert (columns["time_train_s"], columns["time_cpu_s"]) == (2.0, 3.0)
    assert columns["optimizer_steps"] == 2.0  # the larger rank's two micro-batches, one step each
    own = ranks[0]["own"]  # rank 0's view, which the run logged before
    if case == "idle":
        assert own["trained_fraction"] == 0.0 and "loss" not in own and "ratio" not in own
    else:
        assert own["trained_fraction"] == 1.0 and own["loss"] != columns["loss"]
    assert ranks[0]["parity"] == ranks[1]["parity"] == {"0": 0.0, "1": 0.5, "2": 0.25}


def test_ranks_training_other_numbers_of_positions_stop_before_any_backward(tmp_path):
    """Rank 1's algorithm trains 2 positions per unit, rank 0's 3: both ranks raise the same
    one-line error from the round's agreement (no backward ran; no hang until the timeout)."""
    ranks = run_update_ranks(tmp_path, "short")
    assert ranks[0]["error"] == ranks[1]["error"]
    assert ranks[0]["error"].startswith(
        "algorithm __main__:Regression: train_step_indices gives 2 positions per unit on rank 1 but 3 on rank 0"
    )


# ---------------------------------------------------------------- the trainer
def toy_args(out: Path, strategy: str, *extra: str) -> list[str]:
    return [
        "-m",
        "genalign.train",
        "--config",
        "experiment/toy/shapes_grpo",
        "/base/distributed=local",
        f"distributed.training.strategy={strategy}",
        "distributed.training.backend=gloo",
        "distributed.training.timeout_s=3600",
        "rollout.num_steps=4",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=2",
        "eval.every=0",
        "eval.at_start=false",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.num_steps=2",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *extra,
    ]


def test_a_run_whose_rank_zero_trains_nothing_logs_what_rank_one_trained(tmp_path):
    """Rank 0's groups score alike (advantage 0: it only replays its filler), rank 1 trains
    both its samples. metrics.csv (written by rank 0) says half the step's samples trained,
    with rank 1's loss and statistics; the console has one step line per step and one line for
    the final evaluation."""
    scorer = "support:RankZeroConstantReward"
    finished = torchrun(
        *toy_args(
            tmp_path,
            "ddp",
            f"reward.allow_import=[{scorer}]",
            "reward.components.toy_shape=0.0",
            f"reward.components={{{scorer}: 1.0}}",
        )
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"]
    for row in rows:
        assert float(row["zero_std_ratio"]) == 0.5  # the asymmetry happened: rank 0's group was constant
        assert float(row["trained_fraction"]) == 0.5
        assert float(row["optimizer_steps"]) == 1.0
        for name in (
            "loss",
            "policy_loss",
            "kl",
            "ratio",
            "ratio_min",
            "ratio_max",
            "clip_frac",
            "clip_frac_high",
            "clip_frac_low",
            "log_prob_drift",
            "log_prob_drift_max",
            "grad_norm",
        ):
            assert row[name] != "" and math.isfinite(float(row[name])), name
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert float(rows[0]["ratio"]) == 1.0  # rank 1's one micro-batch, before its optimizer step
    console = finished.stderr.splitlines()
    for step in (1, 2):
        assert len([line for line in console if f": step {step}/2, " in line]) == 1, finished.stderr[-4000:]
    assert len([line for line in console if ": eval step 2: " in line]) == 1, finished.stderr[-4000:]


@pytest.mark.parametrize("strategy,parity", [("fsdp2", "true"), pytest.param("ddp", "false", marks=pytest.mark.slow)])
def test_a_user_algorithm_with_one_position_fewer_on_one_rank_is_a_one_line_error(tmp_path, strategy, parity):
    """`user_algorithms:OnePositionFewerOnRankOne` trains one position fewer per unit on rank 1.
    With the parity preflight on, the ranks agree before its replay, whose forwards are
    collective under FSDP2 (each gathers the sharded weights); off, in the round's agreement.
    Either way both ranks exit with the one-line error naming the algorithm, long before
    distributed.training.timeout_s (3600 s here)."""
    user = "user_algorithms:OnePositionFewerOnRankOne"
    finished = torchrun(
        *toy_args(
            tmp_path,
            strategy,
            f"algorithm.name={user}",
            f"algorithm.allow_import=[{user}]",
            "algorithm.timestep_fraction=0.75",
            f"trainer.parity_check={parity}",
        )
    )
    assert finished.returncode != 0
    errors = [line for line in finished.stderr.splitlines() if line.startswith("genalign: error: ")]
    assert errors, finished.stderr[-4000:]
    assert errors[0] == (
        f"genalign: error: algorithm {user}: train_step_indices gives 2 positions per unit on "
        "rank 1 but 3 on rank 0; every rank must train as many positions per unit (each is a "
        "forward and a backward the ranks take together): derive them from the config, not from "
        "a rank's data"
    )
    assert not (tmp_path / "metrics.csv").exists()  # stopped in step 1, before its row
