"""A step's metrics row is the job's: each rank's totals combine into the union's columns
(training/job_metrics.py, distributed.combine_totals); ranks agree on positions per unit
(training/update.py: check_positions). The 2-rank runs are in
tests/integration/test_distributed_metrics.py."""

from __future__ import annotations

import pytest
import torch

from genalign.training import distributed
from genalign.training.distributed import RankTotals, combine_totals
from genalign.training.job_metrics import step_columns, update_columns, update_totals
from genalign.training.update import PositionMismatch, UpdateResult, check_positions

EXTREMES = {"ratio": ("min", "max"), "log_prob_drift": ("max",)}


def result(
    trained: int,
    total: int,
    losses: list[tuple[float, int]],
    stats: dict[str, list[list[float]]],
    names=("ratio", "log_prob_drift", "kl"),
) -> UpdateResult:
    """One rank's round: `losses` as (micro-batch mean, units), `stats` per name one list per call."""
    out = UpdateResult(
        optimizer_steps=2,
        trained_samples=trained,
        total_samples=total,
        grad_norms=[0.5, 1.5],
        stat_extremes=dict(EXTREMES),
    )
    out.losses = [loss for loss, _ in losses]
    out.loss_units = [units for _, units in losses]
    out.stat_names = dict.fromkeys(names)
    for name, calls in stats.items():
        out.stats[name] = [torch.tensor(values) for values in calls]
    return out


def job_columns(*ranks: UpdateResult) -> dict[str, float]:
    """What `step_columns` computes on every rank, with the all-gather replaced by its result."""
    packed = torch.stack([update_totals(r).packed() for r in ranks])  # [world, L]
    return update_columns(combine_totals(update_totals(ranks[0]), packed), ranks[0])


BUSY = result(
    3,
    4,
    [(0.5, 2), (2.0, 1)],
    {"ratio": [[1.0, 1.25], [0.75]], "log_prob_drift": [[0.0, 0.5], [0.25]], "kl": [[0.125, 0.25], [0.375]]},
)
LIGHT = result(1, 4, [(-1.0, 1)], {"ratio": [[2.0]], "log_prob_drift": [[0.125]], "kl": [[0.75]]})
IDLE = result(0, 4, [], {})  # named the statistics while replaying its zero-weight filler, recorded none


def test_ranks_combine_into_the_union_of_their_units():
    """Two ranks training 3 and 1 of their 4 units: means over every recorded value, the loss
    weighted by units, the trained fraction over all units, extremes over both ranks."""
    columns = job_columns(BUSY, LIGHT)
    assert columns["trained_fraction"] == 4 / 8
    assert columns["loss"] == (0.5 * 2 + 2.0 * 1 - 1.0 * 1) / 4
    assert columns["ratio"] == (1.0 + 1.25 + 0.75 + 2.0) / 4
    assert (columns["ratio_min"], columns["ratio_max"]) == (0.75, 2.0)
    assert columns["log_prob_drift_max"] == 0.5 and "log_prob_drift_min" not in columns
    assert columns["kl"] == (0.125 + 0.25 + 0.375 + 0.75) / 4  # values exact in float32: exact sums
    assert (columns["optimizer_steps"], columns["grad_norm"], columns["grad_norm_max"]) == (2.0, 1.0, 1.5)
    # the same rows in the other rank order: every rank derives the same columns
    assert job_columns(LIGHT, BUSY) == columns


def test_an_idle_rank_counts_in_the_fraction_and_adds_nothing_else():
    """Rank 0 trained nothing (its groups scored alike), rank 1 trained: the row is rank 1's
    statistics and loss, with the fraction over both ranks' units, not rank 0's empty view."""
    assert update_columns(update_totals(IDLE), IDLE) == {
        "optimizer_steps": 2.0,
        "trained_fraction": 0.0,
        "grad_norm": 1.0,
        "grad_norm_max": 1.5,
    }
    columns, alone = job_columns(IDLE, BUSY), BUSY.metrics()
    assert columns["trained_fraction"] == 3 / 8 and alone["trained_fraction"] == 3 / 4
    assert {k: v for k, v in columns.items() if k != "trained_fraction"} == {
        k: v for k, v in alone.items() if k != "trained_fraction"
    }


def test_a_step_no_rank_trained_logs_no_loss_and_no_statistics():
    nothing = result(0, 4, [], {}, names=())
    nothing.optimizer_steps, nothing.grad_norms = 0, []
    assert job_columns(nothing, nothing) == {"optimizer_steps": 0.0, "trained_fraction": 0.0}


def test_loss_is_weighted_by_the_units_of_each_micro_batch():
    """A round of micro-batches of 2 units and a remainder of 1: the remainder weighs one unit."""
    assert BUSY.metrics()["loss"] == (0.5 * 2 + 2.0) / 3


def test_ranks_naming_other_figures_are_an_error():
    other = result(
        1,
        4,
        [(-1.0, 1)],
        {"ratio": [[2.0]], "log_prob_drift": [[0.1]], "approx_kl": [[0.6]]},
        names=("ratio", "log_prob_drift", "approx_kl"),
    )
    packed = torch.stack([update_totals(r).packed() for r in (BUSY, other)])
    with pytest.raises(RuntimeError, match="rank 1 reports other metric names than rank 0"):
        combine_totals(update_totals(BUSY), packed)


def test_phases_are_the_slowest_ranks_and_cpu_seconds_add_up():
    totals = [
        RankTotals(sums={"time_cpu_s": cpu}, maxima={"time_train_s": wall}) for wall, cpu in ((1.0, 2.0), (3.0, 0.5))
    ]
    job = combine_totals(totals[0], torch.stack([t.packed() for t in totals]))
    assert (job.maxima, job.sums) == ({"time_train_s": 3.0}, {"time_cpu_s": 2.5})
    one = step_columns(BUSY, {"time_train_s": 1.0, "time_cpu_s": 2.0}, distributed.RankInfo())
    assert one == {**BUSY.metrics(), "time_train_s": 1.0, "time_cpu_s": 2.0}  # one process: its own figures


def test_minima_are_taken_over_ranks():
    totals = [RankTotals(minima={"ratio_min": value}) for value in (0.5, -2.0, float("inf"))]
    job = combine_totals(totals[0], torch.stack([t.packed() for t in totals]))
    assert job.minima == {"ratio_min": -2.0}


class ShortPositions:
    """An algorithm class as a user's module would name it (the error names it)."""


def test_ranks_training_other_numbers_of_positions_are_a_one_line_error_naming_the_algorithm():
    check_positions([3, 3], ShortPositions())
    with pytest.raises(PositionMismatch) as error:
        check_positions([3, 2], ShortPositions())
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        f"algorithm {__name__}:ShortPositions: train_step_indices gives 2 positions per unit on rank 1 but 3 on rank 0"
    )
    with pytest.raises(ValueError, match="no trainable denoising steps"):
        check_positions([0, 0], ShortPositions())
